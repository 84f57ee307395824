"""One Optuna study of a spec: what `dse sweep` (dse/sweep.py) and `dse worker` (dse/worker.py)
both drive. The two drivers are thin; everything they share lives here, below them:

    options.py   SweepOptions (what a run asks for) and SweepError (a study that cannot start)
    space.py     trial <-> design point, the search-space fingerprint, objective and constraint values
    storage.py   opening a storage, heartbeats, stale trials, the PostgreSQL study lock
    grid.py      the budget: evaluated / taken / died / given-up trials, the grid queue, prepare_study
    trial.py     ask -> evaluate -> tell for one trial, its typed TrialEvent, the stop signals

Imports run one way: spec -> evaluate -> cache -> study -> sweep / worker -> results -> report
-> cli. Optuna is imported through `storage.optuna()` only (it is slow to import and chatty).
"""
