"""floorfirst's runtime policy: what a server asks every step.

- `tables`: the deployment's step time per layout, compiled once from the planner (or a calibration);
- `transitions`: plans and costs of the 12 ordered layout switches;
- `policy`: `LayoutPolicy.compile(...)` once, `decide(state) -> Decision` every step;
- `ordering`: FCFS, oracle shortest-remaining-first, prediction-free boosted ordering, preemption victims;
- `loop`: the serving loop (admission, chunked prefill, decode, preemption, switches) against the
  `executor.Executor` protocol defined here; `workloads` and `metrics` around it.

Imports numpy and planner (and, lazily, the calibration artifact); never executor or torch.
"""
