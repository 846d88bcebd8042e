"""The local processing supervisor's Spark configuration classifications (configuration.json)."""

from types import SimpleNamespace

from airflow_smdist.backends.local.job.processing import ProcessingSupervisor


def test_an_entry_without_a_classification_configures_nothing(tmp_path):
    # a configuration.json staged as a plain input is not checked by the request specs: an entry that names no
    # classification is left out of the "configuration applied" line instead of failing the job (str.join of None)
    said: list[str] = []
    supervisor = SimpleNamespace(say=said.append)
    configuration = [{"Classification": "spark-defaults", "Properties": {"spark.executor.memory": "2g"}},
                     {"Properties": {"spark.executor.cores": "2"}}]
    defaults = ProcessingSupervisor.apply_configuration(supervisor, configuration, tmp_path)
    assert defaults == {"spark.executor.memory": "2g"}
    assert said == ["configuration applied: spark-defaults"]
