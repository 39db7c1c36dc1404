"""The desktop dashboard: presents backend objects, holds no business logic."""
