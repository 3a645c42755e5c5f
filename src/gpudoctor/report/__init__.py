"""The report: the Report model (plain data, its JSON schema in docs/report-schema.md), the builder
that fills it from an analysis and its findings, and the renderers (terminal, HTML, JSON) that only
render."""
