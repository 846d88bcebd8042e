"""Content types the XGBoost container accepts beyond text/csv (values from the container at ``f7a93a21``)."""

X_LIBSVM = "text/x-libsvm"
LIBSVM = "text/libsvm"
X_PARQUET = "application/x-parquet"
X_RECORDIO_PROTOBUF = "application/x-recordio-protobuf"
