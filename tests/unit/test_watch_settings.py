import kopf

from inference_operator.api import GROUP, PLURAL, VERSION
from inference_operator.controller.main import CHILDREN, tune
from inference_operator.render import LABEL_SERVER


def test_child_watches_are_filtered_by_the_api_server_and_servers_are_not() -> None:
    settings = kopf.OperatorSettings()
    tune(settings)
    selectors = settings.watching.label_selectors
    for group, version, plural in CHILDREN:
        assert list(selectors.collect(kopf.Resource(group, version, plural))) == [LABEL_SERVER], plural
    assert list(selectors.collect(kopf.Resource(GROUP, VERSION, PLURAL))) == []
    assert list(selectors.collect(kopf.Resource("", "v1", "configmaps"))) == []
