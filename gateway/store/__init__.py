"""The state database: SQLite or PostgreSQL behind one interface, its migrations, and
group commit.
"""
