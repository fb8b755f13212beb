"""Sessions: where each conversation lives and which lifetime of it is current."""
