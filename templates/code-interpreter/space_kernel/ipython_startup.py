# Run by each Python context's ipykernel at start (IPKernelApp.exec_files), in the user's
# namespace: it registers formatters the way E2B's template does, then removes its names.


def _space_setup():
    import json
    import sys

    from IPython import get_ipython
    from IPython.core.formatters import BaseFormatter
    from traitlets import ObjectName, Unicode

    ip = get_ipython()
    if ip is None:
        return

    # dicts and lists come back with an application/json form (result.json).
    def as_json(obj):
        try:
            return json.loads(json.dumps(obj, allow_nan=False))
        except (TypeError, ValueError):
            return None

    json_formatter = ip.display_formatter.formatters["application/json"]
    json_formatter.for_type(dict, as_json)
    json_formatter.for_type(list, as_json)

    # pandas DataFrames also come back as {column: [values]} (result.data), only if the
    # user imported pandas (checked through sys.modules, so nothing is imported here).
    class DataFormatter(BaseFormatter):
        format_type = Unicode("e2b/data")
        print_method = ObjectName("_repr_e2b_data_")
        _return_type = (dict,)

        def __call__(self, obj):
            pandas = sys.modules.get("pandas")
            if pandas is None or not isinstance(obj, pandas.DataFrame):
                return super().__call__(obj)
            try:
                data = obj.to_dict(orient="list")
                for key, values in data.items():
                    data[key] = [v.isoformat() if isinstance(v, pandas.Timestamp) else v
                                 for v in values]
                return json.loads(json.dumps(data, default=str))
            except Exception:
                return None

    ip.display_formatter.formatters["e2b/data"] = DataFormatter(parent=ip.display_formatter)


_space_setup()
del _space_setup
