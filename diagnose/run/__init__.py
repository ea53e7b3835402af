"""Running an attach or an analysis: the one place that knows every stage (collect, read,
classify, analyse, check, build the report, render, write), docs/architecture.md."""
