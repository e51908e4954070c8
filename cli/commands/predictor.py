"""`floorfirst predictor`: llm-d's latency-predictor HTTP API (`/predict`, `/predict/bulk`,
`/predict/bulk/strict`, `/status`) answered with floorfirst's TTFT/TPOT for the endpoint's
deployment (integrations.predictor, integrations.predictor_app), served by uvicorn."""

from __future__ import annotations

import sys
from typing import Annotated, Optional

import typer

from planner.errors import SpecError


def predictor(
    engine_args: Annotated[str, typer.Option("--engine-args", help="The launch command every endpoint of the pool runs, quoted (SGLang or vLLM).")],
    hardware: Annotated[str, typer.Option("--hardware", "-hw", help="The GPU the endpoints run on (a launch line doesn't say).")] = "h200",
    calibration: Annotated[Optional[str], typer.Option("--calibration", help="A calibration artifact (floorfirst calibrate, or follow --out); re-read when it changes. Without one: the datasheet floors' midpoint.")] = None,
    host: Annotated[str, typer.Option("--host", help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", help="Port to listen on (llm-d's PREDICTION_SERVER_URL points here).")] = 8001,
    model_type: Annotated[str, typer.Option("--model-type", help="model_type /status reports: llm-d's client sends single predictions over HTTP for lightgbm or xgboost only.")] = "lightgbm",
) -> None:
    """Serve llm-d's latency-predictor API from floorfirst's calibrated model of the endpoint's deployment."""
    try:
        import uvicorn

        from integrations.predictor_app import create_app
    except ImportError:
        raise SpecError("floorfirst predictor needs starlette and uvicorn: pip install '.[predictor]' in a clone") from None
    from integrations.launch import launched_deployment

    if not 0 < port < 65536:
        raise SpecError(f"--port={port} must be in 1..65535")
    app = create_app(launched_deployment(engine_args, hardware), calibration, model_type)
    sys.stderr.write(f"floorfirst predictor: llm-d latency-predictor API on http://{host}:{port} "
                     f"(set PREDICTION_SERVER_URL=http://{host}:{port})\n")
    uvicorn.run(app, host=host, port=port, log_level="warning")


def register(app: typer.Typer) -> None:
    app.command("predictor")(predictor)
