"""mlx_lm side of bench/lora.py: `python -m mlx_lm lora` with the same flags, plus one machine-readable line per report.

Run as `PY bench/mlx_lm_lora_driver.py [mlx_lm.lora flags]`. It is mlx_lm.lora's own main() (same
parser, config file and defaults, same training), with mlx_lm's reporting callbacks replaced by one
that prints each training report (mlx_lm's on_train_loss_report: loss, learning rate, it/s, tokens/s,
trained tokens and mx.get_peak_memory() in GB) as `BENCH-TRAIN {json}` and each validation as
`BENCH-VAL {json}`: mlx_lm 0.32's progress table leaves tokens/s' exact value and the peak memory out.
"""

import json

import mlx_lm.lora as lora
from mlx_lm.tuner.callbacks import TrainingCallback


class Report(TrainingCallback):
    def on_train_loss_report(self, info):
        print("BENCH-TRAIN " + json.dumps(info), flush=True)

    def on_val_loss_report(self, info):
        print("BENCH-VAL " + json.dumps(info), flush=True)


lora.get_reporting_callbacks = lambda *args, **kwargs: Report()

if __name__ == "__main__":
    lora.main()
