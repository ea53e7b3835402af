"""Reading profiles recorded by py-spy (speedscope, collapsed, chrometrace) and any input file
within a size bound."""
