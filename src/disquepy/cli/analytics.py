"""``disque analytics PATH``: the Spark job analytics (``disquepy.spark.analytics``)."""

from __future__ import annotations

import importlib
from types import ModuleType

import click

from ..extras import missing
from .conn import CliError, Target


def load_analytics() -> ModuleType:
    """Import ``disquepy.spark.analytics``, or raise CliError saying what is missing
    (PySpark, or the Java 17+ it runs on)."""
    problem = missing("spark", "disque analytics")
    if problem:
        raise CliError(problem)
    from disquepy.spark.java import java_problem

    problem = java_problem()
    if problem:  # else PySpark dies in a long traceback when it starts the JVM
        raise CliError(problem)
    try:
        return importlib.import_module("disquepy.spark.analytics")
    except ImportError as e:
        raise CliError(f"disque analytics is not available: cannot import "
                       f"disquepy.spark.analytics ({e})") from None


@click.command("analytics")
@click.argument("path", type=click.Path(exists=True))  # before Spark starts
@click.option("-o", "--out", default="analytics-out", show_default=True,
              help="Directory for the results.")
@click.pass_obj
def command(target: Target, path: str, out: str) -> None:
    """Run the Spark analytics (disquepy.spark.analytics) on the event log under PATH and
    write the results to --out."""
    mod = load_analytics()
    run = getattr(mod, "run_analytics", None)
    if run is None:
        raise CliError("disquepy.spark.analytics has no run_analytics(path, out)")
    run(path, out)  # prints its own summary
    click.echo(f"Results written to {out}")
