"""Python 3.9's ``collections`` ABC aliases (``collections.Mapping``, ...), which Python 3.10 removed, for the
packages of an image whose Python is 3.9 or older run here on a newer Python: the XGBoost image's
``sagemaker_containers`` 2.8.6 (``_mapping.MappingMixin(collections.Mapping)``, imported by ``entry_point`` and
``_env``, which scripts for the image import). A job's host imports this as ``sitecustomize`` (airflow-smdist's
local backend puts it there for such images only: see ``backends/local/inhost/xgbcontainer/__init__.py``)."""

import collections
import collections.abc

for _name in collections.abc.__all__:
    if not _name.startswith("_") and not hasattr(collections, _name):
        setattr(collections, _name, getattr(collections.abc, _name))
del _name
