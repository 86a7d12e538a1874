"""Live status of what serves: the status model and view, engine metrics, tuning advice, multi-node groups
seen as one, and `plan --from-status` proposals (all pure; scraping lives in runner.status)."""
