from room.cli import entry

raise SystemExit(entry())
