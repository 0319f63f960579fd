"""``python -m middleware``: the same as the ``middleware`` command."""

from .cli import main

main(prog_name="middleware")
