"""The shared core of the task commands; it imports minbert, never a command.

    settings.py       typed settings: flags generated from dataclass fields, --config FILE, --print-config
    flag_actions.py   its argparse parts: list and switch (--x/--no-x) actions, `none` for an optional setting
    config_files.py   the one reader of hand-written JSON (--config, space files, run.json): strict, errors by line
    resume.py         the one resume rule, from the settings' fields: what a resumed run may change, older runs
    runs.py           a directory per run: run.json, the checkpoint, curves, predictions/; --resume DIR
    run_files.py      a run's relative files and --model directory, read from the folder the run started in; its
                      trained checkpoint and prediction folder
    exports.py        an export directory's files (tasks.export), read back by tasks.predict; weights checked to fit
    training_setup.py the Training section every command shares, set-up, reading a split, writing predictions
    data.py           the task files' readers (errors with file and line)
    batching.py       the one batching pipeline: a file tokenised once, batches drawn, cut and padded from its ids
    train.py          the one training loop: epochs, dev selection, checkpoints (also mid-epoch), exact resume
    loop_checkpoint.py what the loop saves into its checkpoint and restores from one (train.py's _Loop inherits it)
    loop.py           what the loop takes (Work, FitOptions) and gives (FitResult); watching(), to follow it
    step.py           the step on a GPU that never waits for it: losses summed on the device, read every N steps
    graphs.py         --cuda-graphs: a whole optimiser step captured per batch shape and replayed
    terms.py          the extension point of a command's objective: registered terms
    checkpoints.py    training checkpoints, written atomically, read back checked, RNG states
    recipe.py         the fine-tuning recipe (warm-up and decay, clipping, accumulation, the optimiser)
    precision.py      which precision each device trains in, --precision auto
    distributed.py    torchrun / DistributedDataParallel
    finetune.py       fine-tune modes: which parameters train (full, frozen, BitFit and its controls)
    progress.py       the progress bars (training, dev, prediction), throttled off a terminal
    evaluation.py     the one prediction loop; metrics, prediction and raw-output files in the leaderboard's format
    errors.py         the one error path: user errors as one line, flag checks
    curves.py         per-step losses and per-epoch dev figures: JSON lines, a figure (PNG by default)
    starter_flags.py  the course starter code's flag spellings
    unfinished.py     a run on a student tree with an unwritten part names the part
    tree.py           which tree this is: the reference, or a student tree of a profile
    figures.py        a figure written atomically, in the format its name says
    bitfit_figure.py  BitFit's Figure 1 as a figure (PNG by default)
"""
