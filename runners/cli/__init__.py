"""The command line: argument parsing, the commands, listing and the live progress view."""
