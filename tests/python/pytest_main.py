"""Runs pytest on the test files given as arguments (the main of every Python test target)."""

import sys

import pytest

if __name__ == "__main__":
    sys.exit(pytest.main(["-q", "-p", "no:cacheprovider"] + sys.argv[1:]))
