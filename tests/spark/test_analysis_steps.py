"""The metric steps side by side: a failing step is reported, and nobody waits forever;
steps over record types the trace lacks run no Spark job."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from pyspark.sql import DataFrame, SparkSession

from spark_analysis import analysis, consumers, expected, recovery
from spark_analysis.consumers import CONSUMER_EVS
from spark_analysis.load import load_traces
from spark_analysis.location import OutDir
from spark_analysis.schema import Ev
from spark_analysis.synthetic import Spec, generate

pytestmark = pytest.mark.spark


class Boom(RuntimeError):
    pass


def _failing(message: str) -> Callable[[DataFrame], DataFrame]:
    """A stand-in for a step's function over the records that raises ``message``."""

    def fail(records: DataFrame) -> DataFrame:
        raise Boom(message)

    return fail


@pytest.mark.timeout(120)
def test_a_failed_step_is_raised_and_its_dependents_do_not_wait(
    spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Gossip waits for the published events, latency for the deliveries: both would
    # block for ever if the chain that makes them failed without telling them.
    info = generate(tmp_path / "traces", Spec(seed=2, events=20, nodes=8, malformed=0))
    monkeypatch.setattr(expected, "publishes", _failing("no publishes today"))
    steps: list[str] = []
    with pytest.raises(Boom, match="no publishes today"):
        analysis.run_analysis(
            spark, str(info.out_dir), tmp_path / "out", progress=steps.append, report=False
        )
    assert steps[0] == analysis.STEPS[0] and analysis.STEPS[4] not in steps
    # what the other chains persisted is released all the same
    assert spark._jsparkSession.sharedState().cacheManager().isEmpty()


@pytest.mark.timeout(120)
def test_a_result_no_step_set_is_an_error_not_a_blank_in_the_summary(
    spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    info = generate(tmp_path / "traces", Spec(seed=3, events=10, nodes=6, malformed=0))

    def forgetful_trees(self: analysis._Steps) -> None:
        self.pubs.result()  # waits for another chain, then sets nothing

    monkeypatch.setattr(analysis._Steps, "trees", forgetful_trees)
    with pytest.raises(
        RuntimeError, match="left depth_hist, recovery_nodes, recovery_dropped, consumers unset"
    ):
        analysis.run_analysis(spark, str(info.out_dir), tmp_path / "out", report=False)
    assert not (tmp_path / "out" / "summary.json").exists()
    with pytest.raises(AttributeError):
        analysis._Results().latencies = {}  # type: ignore[attr-defined]  # deliberately setting a slotted field: the refusal is under test


@pytest.mark.timeout(120)
def test_steps_over_record_types_the_trace_lacks_read_nothing(
    spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Synthetic traces have no recover, storage_dropped or durable consumers' records:
    # those steps give their empty results from loading's tally, without a Spark job.
    info = generate(tmp_path / "traces", Spec(seed=4, events=10, nodes=6, malformed=0))
    unread = _failing("read records of a type the trace lacks")
    monkeypatch.setattr(recovery, "recovery_starts", unread)
    monkeypatch.setattr(recovery, "dropped_by_reason", unread)
    monkeypatch.setattr(consumers, "consumer_records", unread)
    result = analysis.run_analysis(spark, str(info.out_dir), tmp_path / "out", report=False)
    assert result.summary["recovery"]["nodes"] == 0
    assert result.summary["recovery"]["dropped"] == {}
    assert "consumers" not in result.summary


def test_loading_names_every_record_type_it_loaded(spark: SparkSession, tmp_path: Path) -> None:
    info = generate(tmp_path / "traces", Spec(seed=5, events=10, nodes=6, malformed=3))
    out = OutDir(spark, tmp_path / "out")
    out.prepare()
    loaded = load_traces(spark, str(info.out_dir), out)
    seen = {row["ev"] for row in loaded.records.select("ev").distinct().collect()}
    assert loaded.record_types == seen
    assert {Ev.PUBLISH, Ev.DELIVER} <= seen and not seen & {Ev.RECOVER, *CONSUMER_EVS}
