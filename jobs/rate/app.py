"""The rating app's thin router (FastAPI): links carry the rater's token, the logic is
`jobs.rate.service.RatingService`, the HTML `jobs.rate.pages`.

    /r/<token>              the rater's next unrated subject (where they left off)
    /r/<token>/<n>          subject n of their list: the form, or their own answers once given
    /lead/<token>           the study lead's progress and agreement
    /lead/<token>/export/<rubric>.csv   the ratings in the importer's CSV layout

A restricted run answers only clients in `cluster_networks` (loopback and private ranges by
default); any other address gets 403. An unknown token is 403 as well, and says nothing more.
"""

from __future__ import annotations

import ipaddress
from urllib.parse import parse_qs

from fastapi import FastAPI, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from starlette.concurrency import run_in_threadpool

from jobs.rate import pages
from jobs.rate.export import export_frames
from jobs.rate.service import RatingService

__all__ = ["create_app", "inside"]

_HEADERS = {"Cache-Control": "no-store", "Referrer-Policy": "no-referrer", "X-Robots-Tag": "noindex"}
_UNKNOWN = "This link is not valid. Ask the study lead for yours."


def inside(host: str | None, networks: list[ipaddress.IPv4Network | ipaddress.IPv6Network]) -> bool:
    """Whether a client address is in one of `networks` (an unparsable or missing one is not)."""
    try:
        addr = ipaddress.ip_address(host or "")
    except ValueError:
        return False
    return any(addr in n for n in networks)


def _html(text: str, status: int = 200) -> HTMLResponse:
    return HTMLResponse(text, status_code=status, headers=_HEADERS)


def create_app(service: RatingService) -> FastAPI:
    app = FastAPI(title="Blinded rating", docs_url=None, redoc_url=None, openapi_url=None)
    networks = [ipaddress.ip_network(n) for n in service.cfg.cluster_networks]
    total = {r: len(service.order(r)) for r in service.study.raters}

    @app.middleware("http")
    async def cluster_only(request: Request, call_next):
        if service.restricted:
            if not inside(request.client.host if request.client else None, networks):
                return _html(pages.error_page("This run holds restricted data and is served only inside the "
                                              "cluster network."), 403)
        return await call_next(request)

    @app.get("/")
    async def root():
        return _html(pages.error_page("Open the link you were given: it carries your own token."), 404)

    def base(token: str) -> str:
        return f"/r/{token}"

    @app.get("/r/{token}")
    async def resume(token: str):
        rater = service.rater(token)
        if rater is None:
            return _html(pages.error_page(_UNKNOWN), 403)
        pos = service.next_position(rater)
        if pos is None:
            return _html(pages.done_page(base=base(token), total=total[rater], restricted=service.restricted))
        return RedirectResponse(f"{base(token)}/{pos}", status_code=303, headers=_HEADERS)

    def show(token: str, rater: str, pos: int, **kw) -> HTMLResponse:
        subject = service.subject_at(rater, pos)
        if subject is None:
            return _html(pages.error_page(f"There is no subject {pos} in your list."), 404)
        answered = service.own_answers(rater, pos) if service.is_done(rater, pos) else None
        status = kw.pop("status", 200)
        return _html(pages.subject_page(
            base=base(token), position=pos, total=total[rater], done=len(service.answers.done(rater)),
            subject=subject, items=service.items, form_description=service.form.description,
            restricted=service.restricted, answered=answered, **kw), status)

    @app.get("/r/{token}/{pos}")
    async def subject(token: str, pos: int, saved: int = 0):
        rater = service.rater(token)
        if rater is None:
            return _html(pages.error_page(_UNKNOWN), 403)
        return show(token, rater, pos, saved=bool(saved), message="Saved." if saved else "")

    @app.post("/r/{token}/{pos}")
    async def answer(token: str, pos: int, request: Request):
        rater = service.rater(token)
        if rater is None:
            return _html(pages.error_page(_UNKNOWN), 403)
        form = {k: v[-1] for k, v in parse_qs((await request.body()).decode("utf-8"), keep_blank_values=True).items()}
        comment = form.pop("comment", None)
        outcome = await run_in_threadpool(service.submit, rater, pos, form, comment)
        if not outcome.saved:
            if outcome.errors:
                return show(token, rater, pos, values={**form, "comment": comment or ""}, errors=outcome.errors,
                            message=outcome.message, status=422)
            return show(token, rater, pos, message=outcome.message, status=409)
        nxt = service.next_position(rater)
        target = f"{base(token)}/{nxt}?saved=1" if nxt is not None else base(token)
        return RedirectResponse(target, status_code=303, headers=_HEADERS)  # a reload never posts again

    @app.get("/lead/{token}")
    async def lead(token: str):
        if not service.study.is_lead(token):
            return _html(pages.error_page(_UNKNOWN), 403)
        progress, alpha, agreement = await run_in_threadpool(
            lambda: (service.progress(), service.alpha(), service.agreement()))
        exports = [(r, f"/lead/{token}/export/{r}.csv") for r in service.form.rubrics]
        return _html(pages.lead_page(
            title=f"Study {service.study.name}", restricted=service.restricted, progress=progress, alpha=alpha,
            agreement=agreement, exports=exports, seed=service.study.seed,
            per_subject=service.study.per_subject, form=service.form_name))

    @app.get("/lead/{token}/export/{rubric}.csv")
    async def export(token: str, rubric: str):
        if not service.study.is_lead(token):
            return _html(pages.error_page(_UNKNOWN), 403)
        frames = await run_in_threadpool(export_frames, service.answers.human_scores(), service.form,
                                         list(service.study.raters))
        if rubric not in frames:
            return _html(pages.error_page(f"no rubric {rubric!r} in this study"), 404)
        return Response(frames[rubric].to_csv(index=False), media_type="text/csv", headers={
            **_HEADERS, "Content-Disposition": f"attachment; filename={service.study.name}-{rubric}.csv"})

    return app
