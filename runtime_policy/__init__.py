"""floorfirst's runtime policy: what a server asks every step, and the loop that asks it.

- `tables`: the deployment's step time per layout, compiled once from the planner (or a calibration),
  over the layouts in the planner's registry; `step_time`: the one step-time formula on them;
- `transitions`: plans and costs of every ordered layout switch, from what each layout declares;
- `policy` (with `pricing` and `capacity_rule`): `LayoutPolicy.compile(...)` once,
  `decide(state) -> Decision` every step (`decision`: the types);
- `ordering`: FCFS, oracle shortest-remaining-first, prediction-free boosted ordering, preemption victims;
- `loop`: the serving loop (a state machine over `decode_set`, `waiting`, `admission`,
  `preemption`, `projection`) against the `executor.Executor` protocol defined here;
  `workloads`, `serving_types` and `metrics` around it.

Imports numpy and planner (and, lazily, the calibration artifact); never executor or torch.
"""
