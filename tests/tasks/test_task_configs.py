"""Every task field is range-checked when the config is built: a value that would silently
drop data (a zero or negative cap), make no sense (dropout 1.5, a negative seed or image
side) or not fit the task (a gigantic sequence, image or data set) is one line naming
``task.FIELD``, before anything is loaded."""

import pytest

from fedbench.config import build_config
from fedbench.errors import UserError
from fedbench.runners.cli.cli import main as cli_main
from fedbench.tasks import TASKS

CASES = [  # (task, field, bad value)
    # caps that would silently drop data, seeds numpy refuses mid-load
    ("domainnet", "max_train_per_domain", 0), ("domainnet", "max_train_per_domain", -3),
    ("domainnet", "split_seed", -1), ("nicopp", "split_seed", -7), ("domainnet", "domains", []),
    ("ledgar", "max_train_examples", 0), ("ledgar", "max_train_examples", -5),
    ("dolly", "max_train_examples", -1), ("dolly", "max_per_category", 0), ("dolly", "split_seed", -1),
    ("natural_instructions", "max_per_category", -2), ("natural_instructions", "split_seed", -2),
    ("ledgar", "eval_max_examples", -1), ("cifar100", "eval_max_examples", 0), ("dolly", "eval_max_examples", 0),
    ("tiny_lm", "eval_max_examples", -1),
    ("ledgar", "eval_batch_size", 0), ("cifar100", "eval_batch_size", -4), ("tiny_text", "eval_batch_size", 0),
    ("dolly", "eval_batch_size", 0),
    # values that make no sense
    ("ledgar", "classifier_dropout", 1.5), ("ledgar", "classifier_dropout", -0.1), ("ledgar", "classifier_dropout", 1.0),
    ("domainnet", "img_size", -5), ("domainnet", "img_size", 0), ("cifar100", "img_size", 3),
    ("ledgar", "tiny_vocab", 0), ("dolly", "tiny_vocab", 3), ("ledgar", "hf_id", " "), ("ledgar", "hf_config", ""),
    ("dolly", "hf_id", ""), ("cifar100", "hf_id", ""), ("cifar100", "model", None), ("domainnet", "data_dir", "a\0b"),
    ("ledgar", "data_dir", ""), ("ledgar", "model", "  "),
    # sizes beyond what the task holds (memory, the model)
    ("ledgar", "seq_len", 10 ** 9), ("dolly", "seq_len", 10 ** 8), ("natural_instructions", "max_new_tokens", 10 ** 7),
    ("domainnet", "img_size", 100_000), ("nicopp", "img_size", 4096), ("domainnet", "n_classes", 10 ** 9),
    ("ledgar", "tiny_vocab", 10 ** 9), ("dolly", "tiny_vocab", 10 ** 8),
    ("tiny_vision", "img_size", 8000), ("tiny_vision", "n_train_per_domain", 10 ** 7), ("tiny_vision", "depth", 10_000),
    ("tiny_vision", "width", 30_000), ("tiny_vision", "n_classes", 10 ** 6),
    ("tiny_text", "seq_len", 10 ** 6), ("tiny_text", "n_train", 10 ** 8), ("tiny_text", "vocab_size", 10 ** 9),
    ("tiny_text", "width", 3_000), ("tiny_text", "n_classes", 10 ** 5),
    ("tiny_lm", "n_train", 10 ** 9), ("tiny_lm", "n_words", 10 ** 7), ("tiny_lm", "width", 4096),
    ("tiny_lm", "n_categories", 10 ** 5), ("tiny_lm", "depth", 1000),
]


@pytest.mark.parametrize("task,field,value", CASES, ids=[f"{t}.{f}={v!r}"[:60] for t, f, v in CASES])
def test_a_bad_task_field_is_one_line_naming_it(task, field, value):
    with pytest.raises(UserError) as e:
        build_config(TASKS.get(task).config_cls, {field: value}, "task")
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith("bad value ") and f" for task.{field}: " in msg, msg


def test_the_limits_say_what_they_bound():
    cases = {("tiny_vision", "n_train_per_domain", 10 ** 7): "GiB; a tiny task's data are limited to 2 GiB",
             ("ledgar", "seq_len", 10 ** 9): "must be an integer >= 8 and <= 8192 (the model's own position limit",
             ("domainnet", "img_size", -5): "must be an integer >= 16 and <= 1024 (or none)",
             ("dolly", "max_per_category", 0): "must be an integer >= 1 (or none)"}
    for (task, field, value), expected in cases.items():
        with pytest.raises(UserError, match=expected.replace("(", r"\(").replace(")", r"\)").replace(".", r"\.")):
            build_config(TASKS.get(task).config_cls, {field: value}, "task")


def test_the_cli_refuses_a_bad_field_before_loading(tmp_path, capsys):
    code = cli_main(["run", "--method", "fedavg", "--task", "ledgar", "--model", "tiny-bert", "--rounds", "1",
                     "--set", "task.classifier_dropout=1.5", "--out", str(tmp_path / "out"), "--no-progress"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and err == ["fedbench: error: bad value 1.5 for task.classifier_dropout: must be a probability "
                                 "in [0, 1)"]

