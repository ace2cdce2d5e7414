# `make nginx-module`: ngx_http_hilock_module, a dynamic module for the
# nginx installed here (Debian's nginx + nginx-dev, installed by
# `sh scripts/deps.sh --nginx` if missing), in $(BUILD)/nginx/:
#   load_module /abs/path/$(BUILD)/nginx/ngx_http_hilock_module.so;
# It links hilock statically ($(STATIC), -fPIC objects) plus -lhiredis
# -luuid. Not part of `make` or `make test`.
.DEFAULT_GOAL := all

NGINX_MODULE := $(BUILD)/nginx/ngx_http_hilock_module.so

.PHONY: nginx-module nginx-deps
nginx-deps:
	sh scripts/deps.sh --nginx

nginx-module: nginx-deps
	$(MAKE) $(STATIC)
	sh scripts/nginx-module.sh $(BUILD)
