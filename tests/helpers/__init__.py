"""What the tests share besides fixtures: the conftest files register fixtures, and the fixtures
and the tests import what they hand out from here (``from helpers.charts import render``), never
``from conftest import``, which resolves to whichever conftest module pytest imported last."""
