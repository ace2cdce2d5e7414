# `make nginx-module`: ngx_http_hilock_module, a dynamic module for the
# nginx installed here (Debian's nginx + nginx-dev, which scripts/deps.sh
# installs if missing), in $(BUILD)/nginx/:
#   load_module /abs/path/$(BUILD)/nginx/ngx_http_hilock_module.so;
# It links hilock statically ($(STATIC), -fPIC objects) plus -lhiredis
# -luuid (and hiredis_ssl + OpenSSL in a TLS build), against the same hiredis as the library (HIREDIS=...). `make test`
# builds it for the nginx suite (tests/nginx/nginx.c).
.DEFAULT_GOAL := all

NGINX_MODULE := $(BUILD)/nginx/ngx_http_hilock_module.so
TEST_TARGETS += nginx-module

.PHONY: nginx-module
nginx-module: deps
	$(MAKE) $(STATIC)
	HILOCK_EXTRA_INC="$(HIREDIS:%=%/include)" HILOCK_EXTRA_LIBS="$(HR_LIBS) $(TLS_LIBS)" \
	    sh scripts/nginx-module.sh $(BUILD)
