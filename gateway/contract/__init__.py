"""The platform boundary: what the core asks of a platform adapter, and the little an
adapter may ask of the core.
"""
