"""``python -m agora.cli`` runs the ``agora`` command."""

from agora.cli.main import app

app(prog_name="agora")
