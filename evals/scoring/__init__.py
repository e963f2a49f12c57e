"""The eval suite's format, the scorers, the summary and the gate's verdict: pure Python (no
Django, no app), so the API, the runner and the tests share one reading of a suite and a policy."""
