"""trainfit for a Hugging Face Trainer or any TRL trainer::

    from trainfit.hf import Callback
    trainer = SFTTrainer(model=model, args=SFTConfig(...), train_dataset=ds, callbacks=[Callback()])

At on_train_begin the callback reads the live run (the model's config, its PEFT adapter, the
TrainingArguments or TRL config, the device: trainfit.live.settings_of_run) and prints the
forecast: fits or not, the peak and its moment, the step time. Callback(stop_if_oom=True) raises
trainfit.live.WillNotFit there instead of starting a run the plan says cannot fit. Every optimizer
step is then timed and its peak recorded (trainfit_runner's Probe), and on_train_end prints the
measurement beside the prediction. Settings the run does not show (seq for a plain Trainer) are
given as keyword arguments in the schema's names: Callback(seq=1024).
"""
from .live import Forecast


def Callback(*, stop_if_oom=False, steps_path=None, rows_path=None, warmup=1, stream=None, **settings):
    """A transformers.TrainerCallback (made on call, so that importing trainfit needs no transformers).
    Its `recorder` is the run's Forecast once training has begun."""
    from trainfit_runner.probe import trainer_callback

    def start(args, model):
        return Forecast(model, args, stop_if_oom=stop_if_oom, steps_path=steps_path, rows_path=rows_path,
                        warmup=warmup, stream=stream, **settings)

    return trainer_callback(start)
