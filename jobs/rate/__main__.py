"""`python -m jobs.rate run_dir=RUN raters=[ana,ben] per_subject=2`: serve the blinded rating
app on a run (or, with `export=DIR`, write its ratings as CSV and exit)."""

from __future__ import annotations

import hydra
import uvicorn
from omegaconf import DictConfig

from jobs.config import run_entrypoint
from jobs.rate.app import create_app
from jobs.rate.config import RateConfig
from jobs.rate.service import RatingService


def links(service: RatingService) -> list[str]:
    cfg = service.cfg
    base = (cfg.base_url or f"http://{cfg.host}:{cfg.port}").rstrip("/")
    lines = [f"  {r:<12} {base}/r/{t}" for r, t in service.study.tokens.items()]
    lines.append(f"  {'study lead':<12} {base}/lead/{service.study.lead_token}")
    return lines


def run(cfg: RateConfig) -> int:
    service = RatingService(cfg)
    n = len(service.study.subject_ids)
    if cfg.export:
        for path in service.export(cfg.export):
            print(f"wrote {path}", flush=True)
        return 0
    service.hold_server_lock()
    what = "new study" if service.created else "resuming study"
    print(f"{what} {service.study.name!r} in {service.folder}: {n} subjects, form {service.form_name}, "
          f"{cfg.per_subject} raters each, seed {service.study.seed}"
          + (" - RESTRICTED data: served to the cluster network only" if service.restricted else ""), flush=True)
    print("links (send each rater only their own):", *links(service), sep="\n", flush=True)
    uvicorn.run(create_app(service), host=cfg.host, port=cfg.port, log_level="warning", access_log=False)
    return 0


@hydra.main(version_base="1.3", config_path="../../conf", config_name="rate")
def main(raw: DictConfig) -> None:
    run_entrypoint(raw, RateConfig, run, "rate config", record_new=False)


if __name__ == "__main__":
    main()
