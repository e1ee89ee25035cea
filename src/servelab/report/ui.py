"""``servelab ui``: the local web page over the runs database (FastAPI, served by uvicorn).

- ``/``: the leaderboard, one row per (run, level); filter by model, engine, hardware (substring)
  and concurrency; sort by any metric column (``?sort=output_tok_s&order=desc``); tick runs and
  compare them.
- ``/runs/{id}``: one run (the same page ``servelab report`` writes).
- ``/compare?ids=A&ids=B``: runs side by side.

Pages are rendered on the server by ``report/html.py`` (escaped, self-contained); the app reads
the database on every request, so runs stored meanwhile appear on reload.
"""

from __future__ import annotations

from urllib.parse import urlencode

from fastapi import FastAPI, HTTPException, Query, Request
from fastapi.responses import HTMLResponse

from servelab.errors import ServelabError
from servelab.report.html import COLUMNS, HIGHER_IS_BETTER, compare_page, leaderboard_page, leaderboard_rows, run_page
from servelab.store.database import Store


def make_app(store: Store) -> FastAPI:
    """The web app over ``store``."""
    app = FastAPI(title="servelab", docs_url=None, redoc_url=None)
    sortable = {key for key, _ in COLUMNS}

    @app.get("/", response_class=HTMLResponse)
    def leaderboard(
        request: Request, model: str = "", engine: str = "", hardware: str = "", concurrency: str = "",
        sort: str = "output_tok_s", order: str = "",
    ) -> str:  # fmt: skip
        if sort not in sortable:
            raise HTTPException(400, f"sort must be one of {', '.join(sorted(sortable))}")
        order = order if order in ("asc", "desc") else ("desc" if sort in HIGHER_IS_BETTER else "asc")
        filters = {"model": model, "engine": engine, "hardware": hardware, "concurrency": concurrency}
        try:
            runs, every = store.runs(model=model or None, engine=engine or None, hardware=hardware or None), store.runs()
        except ServelabError as exc:  # a damaged database: its one line, not a stack trace
            raise HTTPException(500, str(exc)) from None
        rows = leaderboard_rows(runs, int(concurrency) if concurrency.isdecimal() and len(concurrency) <= 9 else None, sort, order)  # "²" is a digit int() refuses

        def sort_url(key: str) -> str:
            flip = "asc" if (key == sort and order == "desc") else ("desc" if key == sort else ("desc" if key in HIGHER_IS_BETTER else "asc"))
            return "/?" + urlencode({**{k: v for k, v in filters.items() if v}, "sort": key, "order": flip})

        return leaderboard_page(every, rows, filters, sort, order, sort_url)

    @app.get("/runs/{run_id}", response_class=HTMLResponse)
    def run(run_id: str) -> str:
        try:
            return run_page(store.get(run_id), links=True)
        except ServelabError as exc:
            raise HTTPException(404, str(exc)) from None

    @app.get("/compare", response_class=HTMLResponse)
    def compare(ids: list[str] = Query(default=[])) -> str:
        if not ids:
            raise HTTPException(400, "tick at least one run to compare")
        try:
            return compare_page([store.get(i) for i in ids], links=True)
        except ServelabError as exc:
            raise HTTPException(404, str(exc)) from None

    return app
