"""A command group that answers a mistyped command with the nearest one
(`gpuaudit chek` -> did you mean check?), as git and kubectl do; click itself
says only "No such command"."""

from __future__ import annotations

import click


class SuggestingGroup(click.Group):
    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        name = args[0] if args else ""
        if name and not name.startswith("-") and not ctx.resilient_parsing and name not in self.list_commands(ctx):
            # Only on this failing path: difflib is no part of a normal start-up.
            from gpuaudit.nearest import did_you_mean

            ctx.fail(f"No such command {name!r}{did_you_mean(name, self.list_commands(ctx)) or '.'}")
        return super().resolve_command(ctx, args)
