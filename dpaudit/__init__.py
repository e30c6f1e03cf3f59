"""dpaudit: measure memorization in language models and train them with differential privacy.

The core package holds everything that is framework-neutral: the command line, the run-directory
formats shared by every stage, privacy accounting, scoring, attacks and the audit report. Trainers
live in the separate ``trainers`` package and are reached only through the ``dpaudit.trainers``
entry-point group, so that importing :mod:`dpaudit` never imports torch or jax.

The Python API, one function per command (:mod:`dpaudit.stages.api`), imported on first use so that
``import dpaudit`` stays light (no torch, no scipy)::

    data = dpaudit.inject("runs/mine", train="train.csv", heldout="test.csv", label_column="category")
    results = dpaudit.attack("runs/model", "runs/mine", ["loss"])     # or a model object, tokenizer=...
    page = dpaudit.report(["runs/np-attack", "runs/dp8-attack"], "reports/np-vs-dp8.html")
    results.to_pandas()                                               # pandas optional

``dpaudit.report`` is also the report package (``dpaudit.report.render``): the package is made callable
when it is imported (:class:`_ReportPackage`), so the name serves both.
"""

__version__ = "0.1.0"

__all__ = ["__version__", "attack", "inject", "report"]

_DOORS = ("attack", "inject")


def __getattr__(name: str):
    if name in _DOORS:
        from dpaudit.stages import api

        return getattr(api, name)
    if name == "report":  # the package, made callable as it is set on this module (_Package.__setattr__)
        import dpaudit.report as report_package

        return report_package
    raise AttributeError(f"module 'dpaudit' has no attribute {name!r}")


def _install_report_door() -> None:
    """Make ``dpaudit.report`` callable: ``dpaudit.report(runs, out)`` is :func:`dpaudit.stages.api.report`.

    Importing a subpackage sets it as an attribute of its parent, which would hide a function of the same name;
    instead this module's class catches that assignment and gives the report package a ``__call__``. The package
    itself is unchanged (``dpaudit.report.write_report``, ``from dpaudit.report.load import ...``).
    """
    import sys
    import types

    class _ReportPackage(types.ModuleType):
        def __call__(self, *args, **kwargs):  # noqa: ANN002, ANN003, ANN204
            from dpaudit.stages.api import report

            return report(*args, **kwargs)

    class _Package(types.ModuleType):
        def __setattr__(self, name: str, value: object) -> None:
            if name == "report" and type(value) is types.ModuleType:
                value.__class__ = _ReportPackage
            super().__setattr__(name, value)

    sys.modules[__name__].__class__ = _Package


_install_report_door()
