"""inference/windows.py's per-window triggers, run through Beam's own trigger driver (the one
the DirectRunner's streaming GroupByKey uses): the panes a window fires, and whether the
window's elements are freed once no pane can follow."""
from apache_beam.transforms import trigger as tr
from apache_beam.transforms.core import Windowing
from apache_beam.transforms.window import FixedWindows, GlobalWindow, WindowFn
from apache_beam.utils.timestamp import Timestamp
from apache_beam.utils.windowed_value import PaneInfoTiming, WindowedValue

from inference.windows import window_trigger


def fire(lateness: float, batches):
    """`batches`: (event timestamps, watermark after them). Returns the panes fired as
    (sorted values, timing) and the number of elements the state still holds."""
    windowing = Windowing(FixedWindows(60), triggerfn=window_trigger(lateness),
                          accumulation_mode=tr.AccumulationMode.ACCUMULATING,
                          allowed_lateness=lateness)
    driver = tr.create_trigger_driver(windowing)
    state = tr.InMemoryUnmergedState()
    panes, watermark = [], Timestamp(0)

    def note(out):
        panes.extend((sorted(p.value), p.pane_info.timing) for p in out)

    for stamps, wm in batches:
        values = [WindowedValue(t, Timestamp(t), windowing.windowfn.assign(
            WindowFn.AssignContext(Timestamp(t), element=t, window=GlobalWindow())))
            for t in stamps]
        note(driver.process_elements(state, values, watermark, watermark))
        watermark = Timestamp(wm)
        for win, (name, domain, ts, _) in state.get_and_clear_timers(watermark):
            note(driver.process_timer(win, name, domain, ts, state, watermark))
    held = sum(len(v) for tags in state.state.values() for tag, v in tags.items()
               if tag == "elements")
    return panes, held


def test_without_lateness_a_window_fires_once_and_frees_its_elements():
    # 10 minutes of 60 s windows: a job kept every window's elements (RSS +8 MB a minute).
    batches = [([m * 60 + s for s in range(0, 60, 6)], m * 60 + 61) for m in range(10)]
    panes, held = fire(0, batches)
    assert [len(v) for v, _ in panes] == [10] * 10
    assert {t for _, t in panes} == {PaneInfoTiming.ON_TIME}
    assert held == 0


def test_with_lateness_a_late_element_updates_its_window():
    panes, _ = fire(30, [([1, 2], 61), ([3], 70)])
    assert panes == [([1, 2], PaneInfoTiming.ON_TIME), ([1, 2, 3], PaneInfoTiming.LATE)]
