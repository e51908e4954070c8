"""floorfirst inside real servers: the engines' own telemetry in, predictions and layout
thresholds out.

- `launch`: a deployment from an engine's launch line (planner.launch), with the prefill chunk it runs;
- `fpm_schema`, `fpm_stream`, `follow`: SGLang's forward-pass metrics (one record per forward pass,
  over ZMQ PUB) read as measured steps of the running deployment, and the calibration refit online
  over a rolling window (`floorfirst follow`);
- `predictor`, `predictor_app`: llm-d's latency-predictor HTTP API answered with floorfirst's
  calibrated TTFT/TPOT (`floorfirst predictor`);
- `thresholds`: the crossovers SGLang's runtime TP/CP/DCP switching reads (`floorfirst thresholds`).

Imports planner and calibration (and runtime_policy for the policy tables); never cli. pyzmq and
msgspec (extra `follow`) and starlette/uvicorn (extra `predictor`) are imported only where used.
"""
