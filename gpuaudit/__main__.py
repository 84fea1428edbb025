"""`python -m gpuaudit`: the same as the `gpuaudit` command."""

from gpuaudit.cli.main import main

main()
