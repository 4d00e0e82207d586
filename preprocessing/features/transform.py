"""The one tf.transform `preprocessing_fn`, built from the schema, used at train and serve time.

Everything that turns raw columns into model inputs happens here, inside the TF graph that
tf.transform saves as `transform_fn/`. The trainer reads its outputs; the exported model embeds
the same graph, so serving cannot drift from training (no train/serve skew).

Transformed feature names (`<name>`: the column's TensorFlow name, schema.tf_name):
  numeric                                     -> float32 `<name>` (z-score) and int64
                                                 `<name>_bucket` (quantile bucket); values
                                                 clipped to the train range first
  zscore / scale_0_1 / passthrough / derived  -> float32 `<name>` (derived `entity`: int64,
                                                 its vocabulary's ids, or hash buckets)
  default: mean                               -> also int64 `<name>_missing` (0/1)
  identity / image                            -> `<name>` unchanged (image: encoded JPEG bytes)
  vocabulary / bucketize / hash               -> int64 `<name>` (vocab file named `<name>`)
  datetime                                    -> int64 `<name>_<part>` (hour 0-23, weekday
                                                 0=Monday, month 0-11, day 0-30, minute 0-59);
                                                 float32 `<name>_days` (days since 1970, z-score)
  crosses                                     -> int64 `cross_<a>_x_<b>`
  label                                       -> float32 (regression) or int64 class index
                                                 (classification; vocab file `_label_classes`; -1 when
                                                 the class was never seen in train)
  key                                         -> string, passed through for joins
"""
from __future__ import annotations

import tensorflow as tf
import tensorflow_transform as tft
from tensorflow_transform import schema_inference as tft_schema  # apply_buckets' own call

from preprocessing.contract.kinds import DATETIME_NUMBERS
from preprocessing.contract.schema import Schema
from preprocessing.contract.values import (
    MONTH_NAMES,
    ORDERED_DATE_PATTERN,
    ORDERED_DATE_RE,
    TWO_DIGIT_PIVOT,
    YEAR_MONTH_PATTERN,
    YEAR_MONTH_RE,
    YMD_COMPLETIONS,
)
from preprocessing.features.module_files import load_module_function

LABEL_VOCAB = "_label_classes"  # column vocabularies are named after TF names: never "_..."
# An `entity` vocabulary keeps its most frequent values; the rest read as an entity never seen
# (the trees keep at most training/models/trees.py's MAX_VOCAB of them anyway).
ENTITY_TOP_K = 10_000


def _days_from_civil(y, m, d):
    """Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's algorithm)."""
    y = y - tf.cast(m <= 2, tf.int64)
    era = y // 400
    yoe = y - era * 400
    doy = (153 * (m + tf.where(m > 2, tf.constant(-3, tf.int64), 9)) + 2) // 5 + d - 1
    return era * 146097 + yoe * 365 + yoe // 4 - yoe // 100 + doy - 719468


def _civil_from_days(days):
    z = days + 719468
    era = z // 146097
    doe = z - era * 146097
    yoe = (doe - doe // 1460 + doe // 36524 - doe // 146096) // 365
    doy = doe - (365 * yoe + yoe // 4 - yoe // 100)
    mp = (5 * doy + 2) // 153
    day = doy - (153 * mp + 2) // 5 + 1
    month = mp + tf.where(mp < 10, tf.constant(3, tf.int64), -9)
    return month, day


def _zone_minutes(s: tf.Tensor) -> tf.Tensor:
    """Minutes east of UTC of what follows the seconds (values.DATETIME_TAIL_PATTERN):
    none, `Z` and `UTC` are 0; `+05:00`, `-0330`, `+05` their offset."""
    zone = tf.strings.strip(tf.strings.regex_replace(
        tf.strings.substr(s, 19, 64), r"^\.[0-9]*", ""))
    zone = tf.strings.regex_replace(zone, r"^([+-][0-9]{2})$", r"\1:00")
    zone = tf.strings.regex_replace(tf.strings.regex_replace(zone, ":", ""), r"^(Z|UTC|)$",
                                    "+0000")
    sign = tf.where(tf.strings.substr(zone, 0, 1) == "-", tf.constant(-1, tf.int64), 1)
    hh = tf.strings.to_number(tf.strings.substr(zone, 1, 2), out_type=tf.int64)
    mm = tf.strings.to_number(tf.strings.substr(zone, 3, 2), out_type=tf.int64)
    return sign * (hh * 60 + mm)


def _month_or_number(text: tf.Tensor) -> tf.Tensor:
    """A date field's number, or the number of the month it names (values.month_number)."""
    digits = tf.strings.regex_full_match(text, "[0-9]+")
    number = tf.strings.to_number(tf.where(digits, "0" + text, "0"), out_type=tf.int64)
    key = tf.strings.lower(tf.strings.regex_replace(text, r"\.", ""))
    hits = tf.equal(tf.expand_dims(key, -1), tf.constant(list(MONTH_NAMES)))
    named = tf.reduce_sum(tf.cast(hits, tf.int64) * tf.constant(list(MONTH_NAMES.values()),
                                                                 tf.int64), axis=-1)
    return tf.where(digits, number, named)


def _two_digit_years(year: tf.Tensor, year_text: tf.Tensor) -> tf.Tensor:
    """A year written in two digits in its century (values.full_year)."""
    return tf.where(tf.strings.length(year_text) == 2,
                    year + tf.where(year < TWO_DIGIT_PIVOT, tf.constant(2000, tf.int64), 1900),
                    year)


def _year_month_minutes(s: tf.Tensor) -> tf.Tensor:
    """Minutes since 1970 (UTC) of the first day of `ym` strings' months (values.year_month:
    `2018-03`, `Mar-2018`, `1960 Jan`, `1998 Q1`)."""
    def groups(*names):  # the text of whichever named group matched
        return tf.strings.regex_replace(
            s, YEAR_MONTH_PATTERN, "".join(f"\\{YEAR_MONTH_RE.groupindex[n]}" for n in names))

    year_text, month_text = groups("y1", "y2"), groups("m1", "m2")
    year = _two_digit_years(tf.strings.to_number("0" + year_text, out_type=tf.int64), year_text)
    quarter = tf.strings.regex_full_match(month_text, "[Qq][1-4]")
    # Both sides are computed: a quarter's digit is read only where there is one.
    digit = tf.where(quarter, tf.strings.substr(month_text, 1, 1), "0")
    month = tf.where(quarter, 3 * tf.strings.to_number(digit, out_type=tf.int64) - 2,
                     _month_or_number(month_text))
    return _days_from_civil(year, month, tf.ones_like(month)) * 1440


def _ordered_minutes(s: tf.Tensor, order: str) -> tf.Tensor:
    """Minutes since 1970 (UTC) of `M/D/YYYY[ H:MM[:SS]]` (`mdy`) or `D/M/...` (`dmy`)
    strings, the month maybe named (`Aug 6, 2009`) (values.ORDERED_DATE_PATTERN; two-digit
    years as values.full_year)."""
    def group(name):  # a named group's text, by its number (RE2's rewrite)
        return tf.strings.regex_replace(s, ORDERED_DATE_PATTERN,
                                        f"\\{ORDERED_DATE_RE.groupindex[name]}")

    year_text = group("y")
    # "0" before each: an absent time of day reads as 0; a month's name reads as its number.
    numbers = {name: tf.strings.to_number("0" + text, out_type=tf.int64)
               for name, text in (("y", year_text), ("H", group("H")), ("M", group("M")))}
    numbers.update({name: _month_or_number(group(name)) for name in ("a", "b")})
    year = _two_digit_years(numbers["y"], year_text)
    month, day = ((numbers["a"], numbers["b"]) if order == "mdy" else
                  (numbers["b"], numbers["a"]))
    return _days_from_civil(year, month, day) * 1440 + numbers["H"] * 60 + numbers["M"]


def datetime_parts(s: tf.Tensor, order: str = "ymd") -> dict:
    """Calendar parts, in UTC, of 'YYYY-MM-DD HH:MM:SS[.fff][zone]' strings (or those of the
    date `order` `mdy` / `dmy`: _ordered_minutes; `ym`: _year_month_minutes), computed with
    TF ops only (so the serving graph converts offsets exactly as preprocess did)."""
    s = tf.strings.strip(s)
    if order == "ym":
        minutes = _year_month_minutes(s)
    elif order != "ymd":
        minutes = _ordered_minutes(s, order)
    else:
        for length, tail in YMD_COMPLETIONS.items():  # a date alone: midnight; no seconds: :00
            s = tf.where(tf.strings.length(s) == length, s + tail, s)

        def num(pos, length):
            return tf.strings.to_number(tf.strings.substr(s, pos, length), out_type=tf.int64)

        days = _days_from_civil(num(0, 4), num(5, 2), num(8, 2))
        minutes = days * 1440 + num(11, 2) * 60 + num(14, 2) - _zone_minutes(s)
    days = minutes // 1440
    minute_of_day = minutes - days * 1440
    month, day = _civil_from_days(days)
    # 1970-01-01 was a Thursday (3 with Monday = 0).
    return {"hour": minute_of_day // 60, "weekday": (days + 3) % 7, "month": month - 1,
            "day": day - 1, "minute": minute_of_day % 60, "days": days,
            "time_of_day": minute_of_day}


def haversine_km(lat1, lon1, lat2, lon2):
    rad = 3.141592653589793 / 180.0
    lat1, lon1, lat2, lon2 = [tf.cast(v, tf.float32) * rad for v in (lat1, lon1, lat2, lon2)]
    a = tf.sin((lat2 - lat1) / 2) ** 2 + tf.cos(lat1) * tf.cos(lat2) * tf.sin((lon2 - lon1) / 2) ** 2
    return 2.0 * 6371.0 * tf.asin(tf.sqrt(tf.clip_by_value(a, 0.0, 1.0)))


def _scale(x, how, name=None):
    """z-score or [0, 1] scaling with the train split's statistics. With a name, the result
    is also bounded to what the train range maps to: a serving value far outside what
    training saw (a malformed 31.8 where every train value is under 9) reaches the model as
    the largest value it learnt from, never as an extrapolation 40 standard deviations out.
    Every analyzer reads x itself (one analysis phase: an analyzer over another's output
    makes a second pass, which the local runner cannot schedule here)."""
    # Named analyzers keep tf.transform's cache keys stable across tracings.
    x = tf.cast(x, tf.float32)
    if how == "scale_0_1":
        out = tft.scale_to_0_1(x, name=name and f"{name}_scale")
        return tf.clip_by_value(out, 0.0, 1.0) if name else out
    if how != "zscore":
        return x
    if not name:
        return tft.scale_to_z_score(x)
    return _bounded_z(x, *_z_stats(x, name))


def _z_stats(x, name, per_element=False):
    """(mean, 1/std, min, max) of x over the train split (per column of a [batch, k] x with
    `per_element`). Every analyzer reads x itself (see _scale)."""
    dims = not per_element
    mean = tft.mean(x, reduce_instance_dims=dims, name=f"{name}_mean")
    std = tf.sqrt(tft.var(x, reduce_instance_dims=dims, name=f"{name}_var"))
    scale = tf.where(std > 0, 1.0 / tf.where(std > 0, std, 1.0), 1.0)  # as scale_to_z_score
    low = tft.min(x, reduce_instance_dims=dims, name=f"{name}_min")
    high = tft.max(x, reduce_instance_dims=dims, name=f"{name}_max")
    return mean, scale, low, high


def _bounded_z(x, mean, scale, low, high):
    """x's z-score, bounded to what the train range [low, high] maps to."""
    return _clipped_z(x, mean, scale, *_z_bounds(mean, scale, low, high))


def _z_bounds(mean, scale, low, high):
    """What the train range [low, high] maps to as z-scores (element by element)."""
    return (low - mean) * scale, tf.maximum(low, high) * scale - mean * scale


def _clipped_z(x, mean, scale, z_low, z_high):
    return tf.clip_by_value((x - mean) * scale, z_low, z_high)


def _mean_fill(x, missing, name, per_element=False):
    """The train split's mean of x's present values (per column with `per_element`): what a
    missing value of a `default: mean` column becomes."""
    dims = not per_element
    count = tft.sum(tf.cast(~missing, tf.float32), reduce_instance_dims=dims,
                    name=f"{name}_present")
    total = tft.sum(tf.where(missing, tf.zeros_like(x), x), reduce_instance_dims=dims,
                    name=f"{name}_sum")
    return total / tf.maximum(count, 1.0)


def _impute_mean(x, name):
    """NaN (a missing value of a `default: mean` column) -> the train split's mean of the
    present values; also the 0/1 missing flag."""
    x = tf.cast(x, tf.float32)
    missing = tf.math.is_nan(x)
    return tf.where(missing, _mean_fill(x, missing, name), x), tf.cast(missing, tf.int64)


def _numeric_columns(xs, imputed, num_buckets: int, name: str):
    """The `numeric` transform of several columns, their analyzers shared: each (present
    count and sum for the imputed ones, mean, variance, min, max, quantiles) runs once for
    all k columns stacked, element by element. Per column, a table of 377 numeric columns
    made ~2,000 analyzers and a Beam graph that took over 10 minutes and 8 GB just to build.
    Each output is computed from its own column and its row of the analyzer results, not
    from the stack: tf.transform walks each output's graph back to its inputs, and outputs
    all reading the stack made that walk quadratic in the columns. A column's rows of the
    statistics come from one unstack each, the bounds are computed for all columns at once,
    and its bucket is one op: tf.transform traces this graph several times per job, so every
    op a column adds is paid per column in each tracing (docs/performance.md). Returns per
    column (z-score bounded to the train range, quantile bucket, missing flag or None)."""
    k = len(xs)
    cols = [tf.cast(v, tf.float32) for v in xs]
    stack = tf.stack(cols, axis=1)
    if any(imputed):
        missing = tf.math.is_nan(stack) & tf.constant([imputed])
        fill = _mean_fill(stack, missing, name, per_element=True)
        stack = tf.where(missing, fill, stack)
        fills = tf.unstack(fill, num=k)
        cols = [tf.where(tf.math.is_nan(c), fills[i], c) if imputed[i] else c
                for i, c in enumerate(cols)]
    mean, scale, low, high = _z_stats(stack, name, per_element=True)
    # _bounded_z for each column, its bounds computed for all columns at once.
    means, scales, lows, highs = (tf.unstack(v, num=k) for v in
                                  (mean, scale, *_z_bounds(mean, scale, low, high)))
    # As tft.bucketize(elementwise=True), whose buckets would read the stack.
    boundaries = tft.quantiles(stack, num_buckets, min(1.0 / num_buckets, 0.01),
                               reduce_instance_dims=False, name=f"{name}_buckets")
    boundaries = tf.reshape(boundaries, [k, -1])
    rows = tf.split(boundaries, k, axis=0)  # [1, boundaries] each
    # What tft.apply_buckets records for the transformed schema: buckets 0..boundaries.
    low_bucket, high_bucket = tf.constant(0, tf.int64), tf.shape(boundaries)[1]
    one_row, flat = tf.constant([1, -1]), tf.constant([-1])
    out = []
    for i, c in enumerate(cols):
        z = _clipped_z(c, means[i], scales[i], lows[i], highs[i])
        if c.shape.rank == 1:  # tft.apply_buckets(c, rows[i]) in 3 ops instead of ~12
            bucket = tf.reshape(tf.raw_ops.UpperBound(
                sorted_inputs=rows[i], values=tf.reshape(c, one_row), out_type=tf.int64), flat)
            tft_schema.set_tensor_schema_override(bucket, low_bucket, high_bucket)
        else:
            bucket = tft.apply_buckets(c, rows[i])
        flag = tf.cast(tf.math.is_nan(xs[i]), tf.int64) if imputed[i] else None
        out.append((z, bucket, flag))
    return out


def _as_string(x):
    return x if x.dtype == tf.string else tf.strings.as_string(x)


def make_preprocessing_fn(schema: Schema):
    """Returns the preprocessing_fn for this schema (a closure over plain data, so it pickles)."""

    def preprocessing_fn(inputs):
        # Inputs and outputs are keyed by the columns' TensorFlow names (schema.tf_name).
        outputs = {}
        # `numeric` columns (a smooth term and a step term: z-score and quantile bucket),
        # analysed together by bucket count.
        groups = {}
        for c in schema.feature_columns():
            if c.transform == "numeric":
                groups.setdefault(c.num_buckets, []).append(c)
        for buckets, cols in sorted(groups.items()):
            done = _numeric_columns([inputs[schema.tf_name(c.name)] for c in cols],
                                    [c.imputed for c in cols], buckets, f"numeric_{buckets}")
            for c, (z, bucket, flag) in zip(cols, done):
                outputs[schema.tf_name(c.name)] = z
                outputs[schema.output_name(c.name, "bucket")] = bucket
                if flag is not None:
                    outputs[schema.output_name(c.name, "missing")] = flag
        for c in schema.feature_columns():
            name = schema.tf_name(c.name)
            x = inputs[name]
            t = c.transform
            if t == "numeric":
                continue
            if c.imputed:
                x, outputs[schema.output_name(c.name, "missing")] = _impute_mean(x, name)
            if t in ("zscore", "scale_0_1", "passthrough"):
                outputs[name] = _scale(x, t, name)
            elif t in ("identity", "image"):
                outputs[name] = tf.identity(x)  # kept as is (image: encoded bytes)
            elif t == "bucketize":
                outputs[name] = tft.bucketize(tf.cast(x, tf.float32), c.num_buckets)
            elif t == "vocabulary":
                outputs[name] = tft.compute_and_apply_vocabulary(
                    _as_string(x), top_k=c.top_k, num_oov_buckets=c.num_oov_buckets,
                    vocab_filename=name)
            elif t == "hash":
                outputs[name] = tft.hash_strings(_as_string(x), c.hash_buckets)
            elif t == "datetime":
                parts = datetime_parts(x, c.date_order)
                for p in c.parts:
                    part = schema.output_name(c.name, p)
                    if p in DATETIME_NUMBERS:  # days since 1970, minutes since midnight
                        outputs[part] = _scale(tf.cast(parts[p], tf.float32), "zscore", part)
                    else:
                        outputs[part] = parts[p]
        for d in schema.derived:
            if d.op == "haversine_km":
                args = [inputs[schema.tf_name(i)] for i in d.inputs]
                outputs[d.name] = _scale(haversine_km(*args), d.transform, d.name)
            elif d.op == "entity":  # the number as text: a category of its own
                x = _as_string(inputs[schema.tf_name(d.inputs[0])])
                if d.transform == "vocabulary":  # one id past the vocabulary: a new entity
                    outputs[d.name] = tft.compute_and_apply_vocabulary(
                        x, top_k=ENTITY_TOP_K, num_oov_buckets=1, vocab_filename=d.name)
                else:
                    outputs[d.name] = tft.hash_strings(x, d.hash_buckets)
        for x in schema.crosses:
            joined = tf.strings.join([_as_string(outputs[f]) for f in x.features], separator="|")
            outputs[x.name] = tft.hash_strings(joined, x.hash_buckets)
        label_name = schema.tf_name(schema.label)
        label = inputs[label_name]
        if schema.task == "classification":
            outputs[label_name] = tft.compute_and_apply_vocabulary(
                _as_string(label), num_oov_buckets=0, default_value=-1, vocab_filename=LABEL_VOCAB)
        else:
            outputs[label_name] = tf.cast(label, tf.float32)
        if schema.key:
            key_name = schema.tf_name(schema.key)
            outputs[key_name] = tf.identity(inputs[key_name])
        return outputs

    return preprocessing_fn


def load_module_preprocessing_fn(path: str):
    """Loads `preprocessing_fn` from a TFX-style module file (local path or gs://).

    The function is traced once, when the pipeline is built, so the module is needed only
    where the job is launched, not on the workers.
    """
    return load_module_function(path, "preprocessing_fn")
