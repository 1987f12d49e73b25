"""Several models training together: non-shared multi-model workflows and HACPO collaboration groups.

`config` holds the job-level team settings (`TeamConfig`, part of `engine.jobs.TrainJob`) and maps them
once to each agent's `SwarmConfig`; `train` runs a team job (one server per agent) end to end.
"""
