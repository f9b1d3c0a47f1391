# One image for every Rota process: `rota server`, `rota worker`, `rota migrate`.
# Build: docker build -t rota .   (the compose file builds it for you)
# The dashboard's front-end libraries, from the npm registry at the versions package-lock.json pins.
FROM node:20-slim AS assets
WORKDIR /assets
COPY package.json package-lock.json ./
# ReDoc: one file of the redoc package, fetched alone (as the Makefile does) and checked against
# the integrity package-lock.json pins; npm ci leaves the optional redoc and its dependencies out.
RUN npm ci --ignore-scripts --omit=optional --no-audit --no-fund \
 && mkdir vendor \
 && cp node_modules/htmx.org/dist/htmx.min.js node_modules/htmx-ext-sse/dist/sse.min.js \
       node_modules/uplot/dist/uPlot.iife.min.js node_modules/uplot/dist/uPlot.min.css \
       node_modules/swagger-ui-dist/swagger-ui-bundle.js node_modules/swagger-ui-dist/swagger-ui.css \
       node_modules/swagger-ui-dist/favicon-32x32.png vendor/ \
 && set -- $(node -p 'const p = require("./package-lock.json").packages["node_modules/redoc"]; p.version + " " + p.integrity') \
 && got=$(npm pack "redoc@$1" --json | node -p 'JSON.parse(require("fs").readFileSync(0, "utf8"))[0].integrity') \
 && test "$got" = "$2" \
 && tar -xzf "redoc-$1.tgz" package/bundles/redoc.standalone.js \
 && cp package/bundles/redoc.standalone.js vendor/

FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /app
COPY pyproject.toml constraints.txt README.md ./
COPY src ./src
COPY --from=assets /assets/vendor ./src/rota/dashboard/static/vendor
RUN pip install -c constraints.txt '.[postgres,redis,rabbitmq,encryption]' \
 && useradd --create-home --uid 10001 rota
USER rota
ENV ROTA_DATA_DIR=/home/rota/.rota
EXPOSE 8000
ENTRYPOINT ["rota"]
CMD ["server", "--host", "0.0.0.0", "--port", "8000"]
