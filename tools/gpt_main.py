"""`bazel run //tools:gpt -- generate ...`: the gpt command line as a Bazel target."""

from gpt.cli import run

if __name__ == "__main__":
    run()
