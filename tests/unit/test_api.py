import pytest
from pydantic import ValidationError

from inference_operator.api import InferenceServer
from tests.support.examples import example_documents, server


def test_examples_are_valid_servers() -> None:
    docs = example_documents()
    assert len(docs) >= 5
    for _name, doc in docs:
        InferenceServer.model_validate(doc)


def test_defaults_fill_an_empty_spec() -> None:
    s = server({"model": {"name": "org/model"}})
    assert s.spec.engine.tensor_parallel_size == "auto"
    assert s.spec.engine.gpu_memory_utilization == 0.9
    assert s.spec.rollout.strategy == "Auto"
    assert s.spec.service.port == 8000
    assert s.spec.replicas == 1


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        ({"model": {"name": "m"}, "engine": {"gpuMemoryUtilization": 1.5}}, "spec.engine.gpuMemoryUtilization"),
        ({"model": {"name": "m"}, "engine": {"tensorParallelSize": 0}}, "spec.engine.tensorParallelSize"),
        ({"model": {"name": "m"}, "engine": {"tensorParallelSize": "many"}}, "spec.engine.tensorParallelSize"),
        ({"model": {"name": "m"}, "resources": {"memory": "lots"}}, "spec.resources.memory"),
        ({"model": {"name": "m"}, "engine": {"dtype": "int3"}}, "spec.engine.dtype"),
        ({"model": {"name": "m"}, "engine": {"tensorParalelSize": 2}}, "spec.engine.tensorParalelSize"),
        ({"model": {}}, "spec.model.name"),
        ({"model": {"name": "m"}, "engine": {"image": ""}}, "spec.engine.image"),
    ],
)
def test_invalid_specs_name_the_field(spec: dict[str, object], field: str) -> None:
    with pytest.raises(ValidationError) as err:
        InferenceServer.model_validate({"metadata": {"name": "x"}, "spec": spec})
    locations = {"spec." + ".".join(str(p) for p in e["loc"][1:]) for e in err.value.errors()}
    assert any(loc.startswith(field) for loc in locations), locations


def test_name_longer_than_children_allow_is_refused() -> None:
    with pytest.raises(ValidationError, match=r"metadata\.name|at most 42"):
        InferenceServer.model_validate({"metadata": {"name": "a" * 43}, "spec": {"model": {"name": "m"}}})


def test_quantities_accept_integers_and_suffixes() -> None:
    s = server({"model": {"name": "m"}, "resources": {"cpu": 4, "memory": "32Gi", "sharedMemory": "512Mi"}})
    assert s.spec.resources.cpu == "4"
    assert s.spec.resources.memory == "32Gi"
