"""Two of Beam's own lookups, answered once instead of per transform and per bundle.

Beam 2.77 asks, for every ParDo as the graph is built, translated and run, and again for
every bundle, whether its DoFn uses state or timers (`userstate.get_dofn_specs`:
`inspect.signature` of every method of a fresh copy), and builds and runs a new argparse
parser each time a transform reads its options (`PipelineOptions.view_as`). Both are pure
answers; together they were about a third of the CPU of a small preprocess run and 43% of
the streaming job's at 300 msg/s (docs/reliability.md). apache/beam#9925 proposed memoizing
the same two. Installed for the job's process by `common_options.job_options` (idempotent);
Dataflow's workers run Beam's own. tests/beam_jobs/test_beam_lookups.py fails if a Beam
upgrade changes the code these stand in for.
"""
from __future__ import annotations

import weakref
from typing import Optional

from apache_beam.options import pipeline_options
from apache_beam.transforms import userstate

_NOT_STATEFUL: set = set()  # DoFn shapes known to use no state or timers
_VIEWS: dict = {}           # id(options) -> {options class: its view}, while the options live


def install() -> None:
    cache_dofn_specs()
    share_option_views()


def _shape(dofn) -> Optional[tuple]:
    """What decides whether a DoFn uses state or timers: its class's methods, and for a
    wrapped function (beam.Map, ParDo of a callable) that function's code and its defaults'
    types; None when that cannot be told (a callable object)."""
    fn = getattr(dofn, "_fn", None)
    if fn is None:
        return type(dofn), None, (), ()
    code = getattr(fn, "__code__", None)
    if code is None:
        return None
    return (type(dofn), code, tuple(type(d) for d in (fn.__defaults__ or ())),
            tuple(type(d) for d in (fn.__kwdefaults__ or {}).values()))


def cache_dofn_specs() -> None:
    """The answer "no state, no timers" is kept per DoFn shape; a stateful DoFn is asked
    every time, as before."""
    from apache_beam.runners.direct import transform_evaluator as te
    if getattr(userstate, "_specs_cached", False):
        return
    beam_get_dofn_specs = userstate.get_dofn_specs

    def get_dofn_specs(dofn):
        shape = _shape(dofn)
        if shape is not None and shape in _NOT_STATEFUL:
            return set(), set()
        states, timers = beam_get_dofn_specs(dofn)
        if shape is not None and not states and not timers:
            _NOT_STATEFUL.add(shape)
        return states, timers

    def is_stateful_dofn(dofn):
        states, timers = get_dofn_specs(dofn)
        return bool(states or timers)

    # userstate's own functions (validate_stateful_dofn, is_stateful_dofn, which the
    # DoFnRunner of every bundle calls) look it up in their module; the DirectRunner's
    # evaluator imported both.
    userstate._beam_get_dofn_specs = beam_get_dofn_specs
    userstate.get_dofn_specs = get_dofn_specs
    te.get_dofn_specs, te.is_stateful_dofn = get_dofn_specs, is_stateful_dofn
    userstate._specs_cached = True


def share_option_views() -> None:
    """One view per (options, class): a view keeps no value of its own (it reads and writes
    the options' shared `_all_options`), so the second is the first again."""
    cls = pipeline_options.PipelineOptions
    if getattr(cls, "_beam_view_as", None) is not None:
        return
    beam_view_as = cls.view_as

    def view_as(self, view_cls):
        key = id(self)
        views = _VIEWS.get(key)
        if views is None:
            try:  # the entry goes with the options (an id is not reused while they live)
                weakref.finalize(self, _VIEWS.pop, key, None)
            except TypeError:
                return beam_view_as(self, view_cls)
            views = _VIEWS[key] = {}
        view = views.get(view_cls)
        if view is None or view._all_options is not self._all_options:
            view = views[view_cls] = beam_view_as(self, view_cls)
        return view

    cls._beam_view_as = beam_view_as
    cls.view_as = view_as
