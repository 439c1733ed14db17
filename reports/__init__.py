"""The views: what users read, drawn from stored records (pkb.store, static.jsonl, eval.jsonl).

Nothing here runs a stage (an import-linter contract in pyproject.toml keeps it so):

    load.py                    the stored records, whole
    console.py, terminal.py    the terminal: run summaries, `pkb-analyze explain`
    corpus_report.py, kernel_page.py, report_parts.py, html_parts.py
                               the HTML report and one page per candidate, as plain data
    templating.py, templates/  its markup: jinja2 templates (autoescaped), Markdown rendered
    formats.py, sarif.py, tables.py, export.py, paper_table.py
                               machine-readable output: JSON, SARIF, parquet/CSV, PKB's and
                               KernelBench's formats, the paper's failure table
    explain_view.py            one entry per finding, for both candidate views
"""
