"""Text for hosts: Jinja2 templates rendered strictly, and the one quoting function per target (shell, unit,
env file, URL, path) every value goes through."""
