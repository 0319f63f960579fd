"""``python -m middleware``: the same as the ``middleware`` command."""

from .cli.main import main

main(prog_name="middleware")
