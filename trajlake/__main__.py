"""`python -m trajlake …` runs the CLI (also under `accelerate launch -m trajlake` / `torchrun`)."""

from trajlake.cli.main import main

if __name__ == "__main__":
    main()
