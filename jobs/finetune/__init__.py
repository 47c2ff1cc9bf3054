"""Fine-tuning on a run's exported dialogues (`python -m jobs.finetune`, issue 43).

- `config`: the recipe (`conf/finetune/`) and the job's typed config;
- `data`: the training records per portion, train split only, test split and leaked dialogues refused;
- `plan`: tokens, steps, GPU-hours and memory per GPU of each planned fine-tune (the dry run);
- `trainer`: the Ray Train `TorchTrainer` running the Hugging Face Trainer (torch and transformers
  imported there only: `pip install -e '.[train]'`);
- `job`: the job's run (data -> plan -> train -> a model file per finished fine-tune).
"""

__all__ = ["config", "data", "job", "plan", "trainer"]
