"""Project Room: each project is one persistent group chat of humans and AI agent members."""

__version__ = "0.1.0"
