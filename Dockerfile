# One image for every Rota process: `rota server`, `rota worker`, `rota migrate`.
# Build: docker build -t rota .   (the compose file builds it for you)
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /app
COPY pyproject.toml constraints.txt README.md ./
COPY src ./src
RUN pip install -c constraints.txt '.[postgres,redis,rabbitmq]' \
 && useradd --create-home --uid 10001 rota
USER rota
ENV ROTA_DATA_DIR=/home/rota/.rota
EXPOSE 8000
ENTRYPOINT ["rota"]
CMD ["server", "--host", "0.0.0.0", "--port", "8000"]
