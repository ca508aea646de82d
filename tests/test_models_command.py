"""``minidtr models`` counts parameters on models built without their data
(``build_model``): the counts it prints must be those of the models ``make_task`` trains."""

import pytest

from minidtr import cli
from minidtr.models import tasks
from minidtr.models.tasks import MODELS, SIZES, make_task


def printed_counts(capsys) -> dict[tuple[str, str], int]:
    assert cli.main(["models"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split()[:3] == ["model", "parameters", f"({'/'.join(SIZES)})"]
    counts = {}
    for line in lines[1:]:
        name, numbers = line.split()[:2]
        for size, number in zip(SIZES, numbers.split("/"), strict=True):
            counts[(name, size)] = int(number.replace(",", ""))
    assert {name for name, _ in counts} == set(MODELS)
    return counts


def test_models_loads_no_data(capsys, monkeypatch):
    def no_data(*args, **kwargs):
        raise AssertionError("minidtr models loaded a dataset")

    for loader in ("load_digits", "shapes_segmentation", "counting_sequences", "generate_listops"):
        monkeypatch.setattr(tasks, loader, no_data)
    printed_counts(capsys)


@pytest.mark.parametrize("size", ["tiny", "small"])
def test_models_prints_the_parameter_counts_of_the_trained_models(capsys, size):
    counts = printed_counts(capsys)
    for name in MODELS:
        assert counts[(name, size)] == make_task(name, size).model.num_parameters(), name


@pytest.mark.slow
def test_models_prints_the_parameter_counts_of_the_paper_models(capsys):
    counts = printed_counts(capsys)
    for name in MODELS:
        assert counts[(name, "paper")] == make_task(name, "paper").model.num_parameters(), name


def test_build_model_builds_the_task_model_with_its_weights():
    for name in MODELS:
        built = tasks.build_model(name, "tiny", seed=3)
        trained = make_task(name, "tiny", seed=3).model
        assert [p.shape for p in built.parameters()] == [p.shape for p in trained.parameters()]
        for a, b in zip(built.parameters(), trained.parameters(), strict=True):
            assert (a.numpy() == b.numpy()).all(), name


def test_build_model_names_an_unknown_model():
    with pytest.raises(ValueError, match="unknown model 'vgg'"):
        tasks.build_model("vgg")
