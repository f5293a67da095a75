"""Everything that knows the CS224N task files and the command line, in layers (arrows point down only):

    commands     python -m tasks.NAME
                 classifier.py        the first exercise: SST / CFIMDB sentiment
                 multitask/           the leaderboard run (make train): command, settings, model and loss, data, toolkit
                 simcse/              the SimCSE stage: the command, its settings, the Quora split
                 deebert/             DeeBERT: the command, its settings, the sweep, its timing and report
                 search/              an Optuna search over a command's settings: its space file, trials, reports
                 predict.py export.py ensemble.py score.py submit.py curves.py attention.py   small commands
    core/        what every command shares: typed settings and config files, run directories, the data pipeline,
                 the one training loop, prediction files and metrics, errors (tasks/core/__init__.py lists them)

The library (minbert/) knows none of this; nothing here is imported by it.
"""
