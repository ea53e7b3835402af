"""Writing the tool's files: every output is claimed, written whole or not at all, and kept when
a later one fails."""
