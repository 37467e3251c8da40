"""DuckDB over committed results: views, named queries, parameters."""
