"""Configuration: the YAML file, its ``${VAR}`` secrets, and the strict models it is
loaded into.
"""
