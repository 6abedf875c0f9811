"""`python -m trajlake …` runs the CLI (also under `accelerate launch -m trajlake` / `torchrun`).

A module entry point besides the `trajlake` console script: multi-process launchers
(`accelerate launch -m`, `torchrun -m`) start a module in each process, not a console script.
"""

from trajlake.cli.main import main

if __name__ == "__main__":
    main()
