"""pkb-analyze's stand-in for the `utils` package of PKB's harness, as candidates import it."""
